"""Entry point of the controller process: ``python -m controller.main CONFIG PORT LOG
[TLS_FOLDER]``.

os-ken 4.x ships no manager command; the app is started with
``AppManager.run_apps`` after os-ken's configuration is parsed. It listens for
switches on 127.0.0.1 only (os-ken's default would be every address), in plain
TCP or, given a run's PKI folder (``controller.tls``), in TLS only.

Every ERROR-or-worse log record of the process (any logger: the app's guarded
handlers, os-ken's event loop, parser and hub threads) is written to the log
file with its traceback and collected by ``ErrorLog``, whose records the
channel's ``status`` reports as ``errors``: no controller exception is
swallowed.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from pathlib import Path


def listen_args(port: int, tls_folder: str | None = None, host: str = "127.0.0.1") -> list[str]:
    """os-ken's options: plain TCP on loopback, or, with a run's PKI
    (``controller.tls``), TLS only (no plain listener at all), requiring a switch
    certificate the run's CA signed. Only TLS may listen on another address than
    loopback (a cluster's: switches on other servers)."""
    args = ["--ofp-listen-host", host]
    if tls_folder is None:
        if not host.startswith("127."):
            raise ValueError(f"plain OpenFlow listens on loopback only, not {host}: use TLS")
        return [*args, "--ofp-tcp-listen-port", str(port)]
    folder = Path(tls_folder)
    return [
        *args,
        "--ofp-ssl-listen-port",
        str(port),
        "--ctl-privkey",
        str(folder / "controller.key"),
        "--ctl-cert",
        str(folder / "controller.pem"),
        "--ca-certs",
        str(folder / "ca.pem"),
    ]


def main(argv: list[str]) -> int:
    config, port, logfile = argv[0], int(argv[1]), argv[2]
    tls_folder = argv[3] if len(argv) > 3 else None
    logging.basicConfig(
        filename=logfile,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from controller.channel import ErrorLog

    ErrorLog.install()
    os.environ["KVFABRIC_CONTROLLER_CONFIG"] = config
    from os_ken import cfg
    from os_ken.base.app_manager import AppManager

    with open(config) as fh:
        host = json.load(fh).get("listen_host", "127.0.0.1")
    cfg.CONF(args=listen_args(port, tls_folder, host), project="os_ken")
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    AppManager.run_apps(["controller.app"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
