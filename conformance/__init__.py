"""ledgercheck.conformance"""
