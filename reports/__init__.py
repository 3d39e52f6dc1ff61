"""ledgercheck.reports: the results format and its renderers.

* :mod:`ledgercheck.reports.results` -- build, validate, write, load and merge results documents
* :mod:`ledgercheck.reports.verdicts` -- the aggregation rules (tests -> clauses -> profiles -> verdict)
* :mod:`ledgercheck.reports.render` -- HTML, Markdown and JUnit renderings, and ``write_bundle``
* :mod:`ledgercheck.reports.commands` -- ``ledgercheck report render|merge|show``
"""
