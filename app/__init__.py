import time

__version__ = "0.1.0"
# the service's first import: a replica's start is timed from here (`speech_start_seconds{phase="total"}`)
IMPORTED_AT = time.perf_counter()
