#!/bin/sh
# Runs a command in a network namespace of its own, with only loopback up.
#
# Chromium drops every request in flight, and fails a navigation with
# ERR_NETWORK_CHANGED, whenever an address of its network namespace changes
# (crbug.com/41465264). The end-to-end tests that make machines of their
# own (tests/integration/machines.py) add bridges and addresses to this
# host's namespace while other tests run, so the tests that drive a browser
# run here instead: their server, agents, browser and driver all talk over
# this namespace's loopback, where nothing else changes. Needs root, as
# those tests do.
set -e
exec unshare --net -- sh -c 'ip link set lo up && exec "$@"' in-own-network "$@"
