"""ledgercheck.reports"""
