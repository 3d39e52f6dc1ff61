"""ledgercheck: conformance and chaos testing for durable work ledgers."""

__version__ = "0.1.0"
PROTOCOL_VERSION = "1.0"
