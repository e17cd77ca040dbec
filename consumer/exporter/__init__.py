"""`placewatch exporter`: the fleet on the bus as Prometheus metrics, with dcgm-exporter's
names (metrics.py, the table), built at each scrape (collector.py) and served over HTTP
(serve.py); its flags in options.py."""
