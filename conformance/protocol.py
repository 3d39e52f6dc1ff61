"""The protocol's types moved to :mod:`ledgercheck.transport.protocol`; this name stays for
adapters written against it (``from ledgercheck.conformance.protocol import LedgerError``)."""

from ledgercheck.transport.protocol import *  # noqa: F403
from ledgercheck.transport.protocol import Handshake, LedgerAdapter, LedgerError, Outcome  # noqa: F401
