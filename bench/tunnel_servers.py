#!/usr/bin/python3
"""The servers bench/run_tunnel_bench.sh runs inside a session (the job's
command): three TCP servers on 127.0.0.1, one thread per connection.

  sink PORT     reads one decimal line N, then reads and discards N bytes
                (or until the peer closes) and answers the count as a
                decimal line: the client knows every byte arrived, not just
                left its socket buffer. (Not "until EOF": a tunnel carries
                no half-close, the client's shutdown(SHUT_WR) ends it.)
  source PORT   reads one decimal line N, sends N bytes as fast as it can,
                closes (N = 0: sends until the peer goes away)
  echo PORT     sends back whatever it reads

usage: tunnel_servers.py SINK_PORT SOURCE_PORT ECHO_PORT
Standard library only.
"""
import socket
import sys
import threading

CHUNK = 256 * 1024
BLOCK = b"\x5a" * CHUNK


def read_line(conn):
    line = b""
    while not line.endswith(b"\n"):
        part = conn.recv(1)
        if not part:
            return None
        line += part
    return int(line)


def sink(conn):
    want = read_line(conn)
    if want is None:
        return
    total = 0
    buf = bytearray(CHUNK)
    while total < want:
        n = conn.recv_into(buf, min(CHUNK, want - total))
        if n == 0:
            break
        total += n
    conn.sendall(f"{total}\n".encode())


def source(conn):
    left = read_line(conn)
    if left is None:
        return
    view = memoryview(BLOCK)
    try:
        if left == 0:
            while True:
                conn.sendall(view)
        while left > 0:
            n = min(left, CHUNK)
            conn.sendall(view[:n])
            left -= n
    except OSError:
        return  # the peer went away (endless mode)
    conn.shutdown(socket.SHUT_WR)
    while conn.recv(CHUNK):  # until the peer closes
        pass


def echo(conn):
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        data = conn.recv(65536)
        if not data:
            break
        conn.sendall(data)


def serve(port, handler):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(64)
    while True:
        conn, _ = ls.accept()

        def run(c=conn):
            try:
                with c:
                    handler(c)
            except OSError:
                pass

        threading.Thread(target=run, daemon=True).start()


def main():
    ports = [int(p) for p in sys.argv[1:4]]
    threads = [threading.Thread(target=serve, args=(p, h), daemon=True)
               for p, h in zip(ports, (sink, source, echo))]
    for t in threads:
        t.start()
    print(f"tunnel_servers: sink {ports[0]}, source {ports[1]}, echo {ports[2]}", flush=True)
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
