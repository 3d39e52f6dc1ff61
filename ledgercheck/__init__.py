"""ledgercheck: conformance and chaos testing for durable work ledgers."""

import os as _os

__version__ = "0.1.0"
PROTOCOL_VERSION = "1.0"

# In a checkout, spec/, transport/, conformance/, chaos/, ... sit beside this folder and install as
# ledgercheck.spec, ledgercheck.transport, ... (pyproject.toml's package-dir).  A Python process
# whose sys.path starts in the checkout's root (``python -m`` or ``-c`` run there, as the harness
# starts its fork server and workers) finds this folder before the installed package; the
# subpackages are then looked up beside it, so that process gets the whole package, not only
# this folder.  An installed ledgercheck has no contract beside it and is left as it is.
_checkout = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_checkout, "spec", "contract", "ledger.yaml")) and _checkout not in __path__:
    __path__.append(_checkout)
del _checkout
