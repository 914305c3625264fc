"""Several machines for one fabric: a local cluster of server namespaces
(``plan`` as pure data, ``local`` carrying it out), ssh to servers (``ssh``), the
fabric built across them as one Mininet network (``network`` on Mininet Cluster
Edition's classes in ``nodes``: the package's only Mininet), a run's leftovers swept
from a server (``sweep``), clock offsets (``clock``) and the per-server checks of
``doctor --cluster`` (``doctor`` judges what ``probe`` gathers)."""
