"""Several machines for one fabric: a local cluster of server namespaces
(``plan`` as pure data, ``local`` carrying it out), ssh to servers (``ssh``),
clock offsets (``clock``) and the per-server checks of ``doctor --cluster``."""
