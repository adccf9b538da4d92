"""The boundary to the backends: httpx calls and their errors (``client``), probes
(``probe``) and the HTTP/1.1 transport underneath (``transport``, ``connection``)."""
