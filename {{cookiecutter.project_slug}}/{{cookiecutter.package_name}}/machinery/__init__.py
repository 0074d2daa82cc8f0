"""The template's machinery: settings, Spark session, sources and sinks, sizing, the checkpoint guard,
inspect, calibration, bench, packaging and the command line.

Not yours to edit: it is the same in every project made from the template, and `cruft update`
replaces it with the template's newer version. Your code is the query module beside this folder
(`query.py`, and `sessions.py` for custom state); the machinery reaches it only through
`core/contract.py`, and your settings through `settings.yaml`.
"""
