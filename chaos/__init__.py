"""ledgercheck.chaos"""
