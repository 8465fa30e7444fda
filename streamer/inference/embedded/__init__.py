"""The embedded CPU Triton: started only when the config names no Triton URL, and imported
only where it is started (streamer/app.py, the command line), never at module level elsewhere.

``server`` (EmbeddedTriton), ``tree`` (the wheel's server tree), ``environment`` (the models'
Python), ``process`` (the child process and its cleanup), ``log`` (its output), ``errors``
(TritonStartError), ``watchdog`` (restarts a server that died).
"""
