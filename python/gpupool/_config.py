"""Where the pool is and how to reach it: the CLI's config file and
environment, with the CLI's precedence (src/cli/client.h).

The server URL comes from, in order: the argument, ``GPUPOOL_SERVER``, the
config file's default server (``$GPUPOOL_CONFIG``, or
``$XDG_CONFIG_HOME/gpupool/config.json``, or ``~/.config/gpupool/config.json``,
which ``gpupool login`` and ``gpupool dev`` write). The token and how to
check the server's certificate belong to a server: the arguments apply to
the server used; the environment's (``GPUPOOL_TOKEN``,
``GPUPOOL_CA_FINGERPRINT``, ``GPUPOOL_CA_FILE``) to ``GPUPOOL_SERVER``, or to
the server used when ``GPUPOOL_SERVER`` is unset; the file's only to the
server they were stored with. So another pool named by an argument or
``GPUPOOL_SERVER`` is never checked against this pool's CA pin, nor sent this
pool's token.

The file keeps one entry per server (``"servers": {URL: {token,
ca_fingerprint, ca_file, insecure}}``) and, at the top level, the default
server with its entry repeated (what versions before ``"servers"`` read).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from typing import Any, Dict, Mapping, Optional

from .errors import GpupoolError

__all__ = ["Endpoint", "config_path", "resolve_endpoint"]


@dataclass(frozen=True)
class Endpoint:
    """A server (or list of servers), the token for it, and how to check it."""

    server: str = ""
    token: str = ""
    ca_fingerprint: str = ""
    ca_file: str = ""
    insecure: bool = False


def config_path(env: Optional[Mapping[str, str]] = None) -> str:
    """The config file the CLI reads."""
    env = os.environ if env is None else env
    if env.get("GPUPOOL_CONFIG"):
        return env["GPUPOOL_CONFIG"]
    if env.get("XDG_CONFIG_HOME"):
        return os.path.join(env["XDG_CONFIG_HOME"], "gpupool", "config.json")
    return os.path.join(env.get("HOME") or ".", ".config", "gpupool", "config.json")


def _same_server_form(url: str) -> str:
    """"https://a:8470/" and "https://a:8470" are one server."""
    return url.rstrip("/")


def _entry_from_json(j: Any) -> Endpoint:
    if not isinstance(j, dict):
        return Endpoint()

    def s(key: str) -> str:
        v = j.get(key)
        return v if isinstance(v, str) else ""

    return Endpoint(server=_same_server_form(s("server")), token=s("token"),
                    ca_fingerprint=s("ca_fingerprint"), ca_file=s("ca_file"),
                    insecure=j.get("insecure") is True)


def _read_config(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
    except (OSError, ValueError):
        return {}
    return j if isinstance(j, dict) else {}


def _stored_for(config: Dict[str, Any], server: str) -> Endpoint:
    """The file's credentials for `server`: its entry under "servers", or the
    top-level fields when they are that server's. Nothing for a server the
    file does not know."""
    servers = config.get("servers")
    if isinstance(servers, dict):
        for url, entry in servers.items():
            if _same_server_form(url) == server:
                return replace(_entry_from_json(entry), server=server)
    top = _entry_from_json(config)
    if top.server == server:
        return top
    return Endpoint(server=server)


def resolve_endpoint(server: Optional[str] = None, token: Optional[str] = None,
                     ca_fingerprint: Optional[str] = None, ca_file: Optional[str] = None,
                     insecure: bool = False, env: Optional[Mapping[str, str]] = None) -> Endpoint:
    """The endpoint the CLI would use, given the same values as its flags
    (None or "": not given). Raises :class:`~gpupool.GpupoolError` when no
    server is named anywhere."""
    env = os.environ if env is None else env
    config = _read_config(config_path(env))
    env_server = _same_server_form(env.get("GPUPOOL_SERVER", ""))
    chosen = _same_server_form(server or "") or env_server or _entry_from_json(config).server
    if not chosen:
        raise GpupoolError("no server: run `gpupool login --server URL`, pass server=URL, set "
                           "GPUPOOL_SERVER, or start a local pool with `gpupool dev`")
    e = _stored_for(config, chosen)
    fields = {"token": e.token, "ca_fingerprint": e.ca_fingerprint, "ca_file": e.ca_file}
    if not env_server or env_server == chosen:
        for field, var in (("token", "GPUPOOL_TOKEN"), ("ca_fingerprint", "GPUPOOL_CA_FINGERPRINT"),
                           ("ca_file", "GPUPOOL_CA_FILE")):
            if env.get(var):
                fields[field] = env[var]
    for field, value in (("token", token), ("ca_fingerprint", ca_fingerprint), ("ca_file", ca_file)):
        if value:
            fields[field] = value
    return Endpoint(server=chosen, insecure=e.insecure or insecure, **fields)
