"""ledgercheck.reference"""
