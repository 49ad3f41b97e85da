"""The node's metrics in Prometheus' text format: what the hook did (from its records in the
state dir), the SELinux denials `ocihook audit` ties to its containers and files (from the
audit log), and the devices (inventory, health, allocation, the driver's facts).

Everything here reads what is already there and writes nothing: the hook never imports it
and pays nothing for it. `hookstats.py` and `denials.py` read incrementally, `devices.py`
joins the device plugin's view with the records, `collector.py` turns the plain data into
metric families of the Prometheus client library and `server.py` serves them over HTTP,
in the device plugin's process (`ocihook device-plugin --metrics-port`) or on its own
(`ocihook exporter`).
"""
