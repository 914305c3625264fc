"""Entry point of the controller process: ``python -m controller.main CONFIG PORT``.

os-ken 4.x ships no manager command; the app is started with
``AppManager.run_apps`` after os-ken's configuration is parsed. It listens for
switches on 127.0.0.1 only (os-ken's default would be every address).

Every ERROR-or-worse log record of the process (any logger: the app's guarded
handlers, os-ken's event loop, parser and hub threads) is written to the log
file with its traceback and collected by ``ErrorLog``, whose records the
channel's ``status`` reports as ``errors``: no controller exception is
swallowed.
"""

from __future__ import annotations

import logging
import os
import signal
import sys


def main(argv: list[str]) -> int:
    config, port, logfile = argv[0], int(argv[1]), argv[2]
    logging.basicConfig(
        filename=logfile, level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )  # fmt: skip
    from controller.channel import ErrorLog

    ErrorLog.install()
    os.environ["KVFABRIC_CONTROLLER_CONFIG"] = config
    from os_ken import cfg
    from os_ken.base.app_manager import AppManager

    cfg.CONF(
        args=["--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port", str(port)],
        project="os_ken",
    )
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    AppManager.run_apps(["controller.app"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
