"""``royalefleet alerts test [--alertmanager URL | --direct]``: fire a test alert end to end.

- Under Compose (the default): POST ``royalefleet_test_alert`` (severity ``warning``, ending
  after 5 minutes) to Alertmanager's API, ``<URL>/api/v2/alerts`` (``ALERTMANAGER_URL``, else
  ``http://127.0.0.1:$ALERTMANAGER_PORT``, 9093: compose.yaml publishes it on loopback); it
  reaches ``ALERT_WEBHOOK_URL`` after Alertmanager's ``group_wait`` (30 s), by the very route
  every rule's alert takes.
- ``--direct`` (``make run``, or to check the receiver alone): POST the same alert in
  Alertmanager's webhook JSON straight to ``ALERT_WEBHOOK_URL``, as ``royalefleet up``'s alert
  relay posts fired alarms (royalefleet/alert_relay.py).

Exit 0 when the POST was accepted, 1 when it was not (the reason and the fix printed), 2 when
the variable it needs is unset. Without a local install, from the Compose stack's own image:
``docker compose run --rm --no-deps keys python -m royalefleet.cmd_alerts test --alertmanager
http://alertmanager:9093``.
"""

from __future__ import annotations

import argparse
import os
import sys

from royalefleet.alert_relay import TEST_ALERT, post, test_alert, webhook_payload
from royalefleet.alert_names import ALERT_WEBHOOK_VAR, ALERTMANAGER_VAR

DEFAULT_PORT = "9093"


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``alerts`` (one action, ``test``) on the ``royalefleet`` command line."""
    p = subparsers.add_parser("alerts", help="fire a test alert end to end (royalefleet alerts test)",
                              description="Fire a test alert to your receiver (docs/alarms.md, \"Where alerts show "
                                          "and how they reach you\").")
    actions = p.add_subparsers(dest="alerts_action", metavar="ACTION", required=True)
    t = actions.add_parser("test", help="send royalefleet_test_alert through Alertmanager (or --direct to the webhook)",
                           description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    where = t.add_mutually_exclusive_group()
    where.add_argument("--alertmanager", metavar="URL",
                       help=f"Alertmanager's address (default ${ALERTMANAGER_VAR}, else http://127.0.0.1:"
                            f"$ALERTMANAGER_PORT, port {DEFAULT_PORT})")
    where.add_argument("--direct", action="store_true",
                       help=f"post straight to ${ALERT_WEBHOOK_VAR}, as `royalefleet up` does (no Alertmanager)")
    t.set_defaults(func=run)
    return p


def alertmanager_url(args, environ=os.environ) -> str:
    url = (args.alertmanager or environ.get(ALERTMANAGER_VAR)
           or f"http://127.0.0.1:{environ.get('ALERTMANAGER_PORT') or DEFAULT_PORT}")
    return url.rstrip("/")


def run(args, environ=os.environ) -> int:
    if args.direct:
        url = environ.get(ALERT_WEBHOOK_VAR, "").strip()
        if not url:
            print(f"royalefleet alerts test: {ALERT_WEBHOOK_VAR} is not set: set it to your receiver's URL "
                  f"(export {ALERT_WEBHOOK_VAR}=https://ntfy.sh/<topic>) and run this again", file=sys.stderr)
            return 2
        try:
            post(url, webhook_payload([test_alert("direct") | {"status": "firing"}]))
        except OSError as exc:
            print(f"royalefleet alerts test: the receiver refused the test alert: {exc}; check {ALERT_WEBHOOK_VAR}",
                  file=sys.stderr)
            return 1
        print(f"posted {TEST_ALERT} to {ALERT_WEBHOOK_VAR}; it should be there now")
        return 0
    base = alertmanager_url(args, environ)
    try:
        post(base + "/api/v2/alerts", [test_alert("through Alertmanager")])
    except OSError as exc:
        print(f"royalefleet alerts test: Alertmanager did not take the test alert: {exc}. Is the monitoring profile "
              f"up (`docker compose --profile monitoring up -d`)? Another address: --alertmanager URL; no "
              f"Alertmanager (make run): --direct", file=sys.stderr)
        return 1
    print(f"Alertmanager at {base} took {TEST_ALERT}; it reaches {ALERT_WEBHOOK_VAR} within about 30 s "
          f"(group_wait). Nothing there: `docker compose logs alertmanager` names the failed delivery")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m royalefleet.cmd_alerts test ...`` (in the images: standard library only)."""
    parser = argparse.ArgumentParser(prog="python -m royalefleet.cmd_alerts")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["alerts", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
