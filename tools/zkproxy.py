#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Controllable TCP proxy on 127.0.0.1 for partition tests (stdlib only).

    zkproxy.py --listen PORT --target HOST:PORT --ctrl PORT --ready-file FILE [--owner PID]

PORT 0 lets the kernel choose.  Once both sockets listen, "LISTEN_PORT CTRL_PORT" is written
(atomically) to FILE.

Control port: send one command per line, each is answered by one line "ok <state>":
  cut        close every current connection; new connections are accepted and dropped at once
  blackhole  silent partition: connections stay open but no byte is forwarded in either
             direction; new connections are accepted but not connected/forwarded.  Data that
             arrives meanwhile is held back (like unacknowledged TCP segments), not lost.
  holdnew    current connections forward normally; new connections are accepted but held (not
             connected to the target) until "heal".  For a client that must not reconnect
             while its old connection's last requests are still to be served.
  holdop OP  client requests are forwarded until one of ZooKeeper op code OP arrives: it and every
             request after it (on any connection) are held, in order, until "heal"; replies and
             events still flow.  For a reply that must arrive only after the client gave up on it.
  heal       forward normally again (held connections resume, new ones are forwarded)
  status     report the state
  held OP    how many client requests of ZooKeeper op code OP (e.g. 2 = delete) arrived while
             blackholed, since the last "blackhole" command, or were held by "holdop" since it:
             answered "ok N".  Requests are the
             length-prefixed frames of the client-to-server stream after its connect request.
  paths OP   the paths of those held requests of op code OP (e.g. 15 = create2), in arrival
             order: answered "ok PATH PATH ..." ("ok" alone when there are none).
  waiting    how many new connections are held unconnected right now (blackhole, holdnew):
             answered "ok N".
States: normal, cut, blackhole, holdnew.  An unknown command gets "error unknown command <cmd>".

Exits on SIGTERM/SIGINT, or when process --owner PID is gone.
"""

import argparse
import asyncio
import os
import signal
import sys

CHUNK = 65536


class Proxy:
    def __init__(self, target_host, target_port):
        self.target_host = target_host
        self.target_port = target_port
        self.state = "normal"
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.admitting = asyncio.Event()   # new connections are connected to the target
        self.admitting.set()
        self.tasks = set()       # one handler task per client connection
        self.writers = {}        # task -> list of StreamWriters to abort on cut
        self.held = {}           # op code -> paths (or None) of client requests held while blackholed
        self.waiting = 0         # new connections held unconnected (blackhole, holdnew)
        self.hold_op = None      # holdop: the op code whose first request closes the gate
        self.op_gate = asyncio.Event()   # open unless holdop holds the requests
        self.op_gate.set()

    # -- control ---------------------------------------------------------------------------
    def set_state(self, state):
        if state == "blackhole" and self.state != "blackhole":
            self.held = {}
        self.state = state
        if state in ("normal", "holdnew"):
            self.flowing.set()
        else:
            self.flowing.clear()
        if state == "normal":
            self.admitting.set()
            self.hold_op = None
            self.op_gate.set()
        else:
            self.admitting.clear()
        if state == "cut":
            self.drop_all()

    def drop_all(self):
        for task in list(self.tasks):
            for w in self.writers.get(task, []):
                abort(w)
            task.cancel()

    # -- data path -------------------------------------------------------------------------
    async def handle_client(self, creader, cwriter):
        if self.state == "cut":
            abort(cwriter)
            return
        task = asyncio.current_task()
        self.tasks.add(task)
        self.writers[task] = [cwriter]
        try:
            if not self.admitting.is_set():   # blackhole, holdnew: hold new connections unconnected
                self.waiting += 1
                try:
                    await self.admitting.wait()
                finally:
                    self.waiting -= 1
            try:
                sreader, swriter = await asyncio.wait_for(
                    asyncio.open_connection(self.target_host, self.target_port), 10)
            except (OSError, asyncio.TimeoutError):
                return
            self.writers[task].append(swriter)
            if self.state == "cut":
                return
            up = asyncio.ensure_future(self.pump_requests(creader, swriter))
            down = asyncio.ensure_future(self.pump(sreader, cwriter))
            try:
                await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                up.cancel()
                down.cancel()
                await asyncio.gather(up, down, return_exceptions=True)
        except asyncio.CancelledError:
            pass
        finally:
            for w in self.writers.pop(task, []):
                abort(w)
            self.tasks.discard(task)

    async def pump(self, reader, writer):
        try:
            while True:
                await self.flowing.wait()
                data = await reader.read(CHUNK)
                if not data:
                    return
                await self.flowing.wait()   # hold the chunk while blackholed
                writer.write(data)
                await writer.drain()
        except (OSError, ConnectionError):
            return

    async def pump_requests(self, reader, writer):
        """Client to server: like pump(), but it keeps reading while blackholed (the bytes are held
        here instead of in the kernel, and forwarded in order once healed) so that it can count the
        requests that arrive meanwhile."""
        chunks = asyncio.Queue()
        frames = FrameCounter()

        async def read_side():
            while True:
                data = await reader.read(CHUNK)
                held = not self.flowing.is_set()
                for op, path, frame in frames.feed(data):   # whole frames, forwarded one by one
                    if self.hold_op is not None and op == self.hold_op and self.op_gate.is_set():
                        self.op_gate.clear()   # this request and all after it wait for "heal"
                    gated = not self.op_gate.is_set()
                    if held or gated:
                        self.held.setdefault(op, []).append(path)
                    await chunks.put((gated, frame))
                if not data:
                    await chunks.put((False, b""))
                    return

        reading = asyncio.ensure_future(read_side())
        try:
            while True:
                gated, data = await chunks.get()
                if not data:
                    return
                if gated:
                    await self.op_gate.wait()   # held by holdop
                await self.flowing.wait()   # hold the bytes while blackholed
                writer.write(data)
                await writer.drain()
        except (OSError, ConnectionError):
            return
        finally:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)

    async def handle_ctrl(self, reader, writer):
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                cmd = line.decode("ascii", "replace").strip().lower()
                if not cmd:
                    continue
                if cmd in ("cut", "blackhole", "holdnew", "heal"):
                    self.set_state("normal" if cmd == "heal" else cmd)
                    reply = "ok %s\n" % self.state
                elif cmd.startswith("holdop ") and cmd[7:].strip().isdigit():
                    self.held = {}
                    self.hold_op = int(cmd[7:])
                    reply = "ok holdop\n"
                elif cmd == "status":
                    reply = "ok %s\n" % self.state
                elif cmd == "waiting":
                    reply = "ok %d\n" % self.waiting
                elif cmd.startswith("held ") and cmd[5:].strip().lstrip("-").isdigit():
                    reply = "ok %d\n" % len(self.held.get(int(cmd[5:]), []))
                elif cmd.startswith("paths ") and cmd[6:].strip().lstrip("-").isdigit():
                    paths = [p for p in self.held.get(int(cmd[6:]), []) if p is not None]
                    reply = " ".join(["ok"] + paths) + "\n"
                else:
                    reply = "error unknown command %s\n" % cmd
                writer.write(reply.encode())
                await writer.drain()
        except (OSError, ConnectionError, ValueError):
            pass
        finally:
            abort(writer)


class FrameCounter:
    """Splits a client-to-server ZooKeeper stream into its length-prefixed frames and yields each
    whole frame with the op code of its request (None for the first frame, the connect request) and
    the path that most requests carry first (None when the frame has none)."""

    def __init__(self):
        self.buf = b""
        self.seen_connect = False

    def feed(self, data):
        self.buf += data
        ops = []
        while len(self.buf) >= 4:
            n = int.from_bytes(self.buf[:4], "big", signed=True)
            if n < 0 or len(self.buf) < 4 + n:
                break
            raw, self.buf = self.buf[:4 + n], self.buf[4 + n:]
            frame = raw[4:]
            op = path = None
            if not self.seen_connect:
                self.seen_connect = True
            elif len(frame) >= 8:
                op = int.from_bytes(frame[4:8], "big", signed=True)  # after the xid
                if len(frame) >= 12:
                    n = int.from_bytes(frame[8:12], "big", signed=True)
                    if 0 < n <= len(frame) - 12:
                        path = frame[12:12 + n].decode("utf-8", "replace")
            ops.append((op, path, raw))
        return ops


def abort(writer):
    try:
        writer.transport.abort()
    except Exception:
        pass


def owner_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return rest[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


async def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", type=int, required=True, help="listen port (0 = free port)")
    ap.add_argument("--target", required=True, help="HOST:PORT to forward to")
    ap.add_argument("--ctrl", type=int, required=True, help="control port (0 = free port)")
    ap.add_argument("--ready-file", required=True, help="gets 'LISTEN_PORT CTRL_PORT' when ready")
    ap.add_argument("--owner", type=int, default=0, help="exit when this pid is gone")
    args = ap.parse_args()

    host, sep, port = args.target.rpartition(":")
    if not sep or not port.isdigit():
        ap.error("--target must be HOST:PORT")
    proxy = Proxy(host or "127.0.0.1", int(port))

    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, done.set)

    server = await asyncio.start_server(proxy.handle_client, "127.0.0.1", args.listen,
                                        reuse_address=True, backlog=128)
    ctrl = await asyncio.start_server(proxy.handle_ctrl, "127.0.0.1", args.ctrl,
                                      reuse_address=True)
    lport = server.sockets[0].getsockname()[1]
    cport = ctrl.sockets[0].getsockname()[1]
    tmp = "%s.tmp.%d" % (args.ready_file, os.getpid())
    with open(tmp, "w") as f:
        f.write("%d %d\n" % (lport, cport))
    os.replace(tmp, args.ready_file)

    async def watch_owner():
        while owner_alive(args.owner):
            await asyncio.sleep(0.5)
        done.set()

    watcher = asyncio.ensure_future(watch_owner()) if args.owner > 0 else None
    await done.wait()
    if watcher:
        watcher.cancel()
    server.close()
    ctrl.close()
    proxy.drop_all()
    await asyncio.sleep(0)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    sys.exit(0)
