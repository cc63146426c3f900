#!/usr/bin/python3
"""A simple-PMI client for tests, run as a rank: speaks PMI-1 or PMI-2 on PMI_FD as MPICH's clients do.

usage: pmi_client.py v1|v2 MODE [ARG...]
  exchange                 init, put a key, barrier/fence, read every rank's key and the process mapping, finalize
  bad KIND                 send one bad command (oversized, unknown, get-before-init, put-after-finalize) and print
                           the server's answer; exits 0 only if the answer is an error
  close-in-barrier RANK    RANK enters the barrier and closes PMI_FD, then lives on; the others wait in the barrier
  abort RANK CODE          RANK calls abort with exit code CODE (PMI-1) or a message (PMI-2); the others wait
  appnum LABEL             init, print the app number the server gives (get_appnum, or fullinit's) with LABEL
  flood PUTS SIZE BARRIERS put PUTS keys of SIZE-byte values, with BARRIERS barriers spread among them, then
                           finalize and print how many; a put refused is printed, and the rank then waits 60 s
"""
import os
import sys
import time

RANK = int(os.environ["PMI_RANK"])
SIZE = int(os.environ["PMI_SIZE"])
FD = int(os.environ["PMI_FD"])


class Pmi:
    def __init__(self, version):
        self.version = version
        self.buffer = b""

    def send_raw(self, data):
        os.write(FD, data)

    def send(self, name, **fields):
        if self.version == 1 or name == "init":
            line = " ".join([f"cmd={name}"] + [f"{k}={v}" for k, v in fields.items()]) + "\n"
            self.send_raw(line.encode())
        else:
            body = ";".join([f"cmd={name}"] + [f"{k}={v}" for k, v in fields.items()]) + ";"
            self.send_raw(f"{len(body):<6}{body}".encode())

    def _fill(self):
        data = os.read(FD, 65536)
        if not data:
            raise EOFError("PMI connection closed")
        self.buffer += data

    def receive(self, framed):
        if not framed:
            while b"\n" not in self.buffer:
                self._fill()
            line, self.buffer = self.buffer.split(b"\n", 1)
            return dict(pair.split("=", 1) for pair in line.decode().split(" ") if "=" in pair)
        while len(self.buffer) < 6:
            self._fill()
        length = int(self.buffer[:6])
        while len(self.buffer) < 6 + length:
            self._fill()
        body, self.buffer = self.buffer[6:6 + length].decode(), self.buffer[6 + length:]
        return dict(pair.split("=", 1) for pair in body.split(";") if "=" in pair)

    def ask(self, name, **fields):
        self.send(name, **fields)
        return self.receive(self.version == 2 and name != "init")

    def init(self):
        answer = self.ask("init", pmi_version=self.version, pmi_subversion=1 if self.version == 1 else 0)
        assert answer["cmd"] == "response_to_init" and answer["rc"] == "0", answer
        if self.version == 2:
            full = self.ask("fullinit", pmirank=RANK)
            assert full["cmd"] == "fullinit-response" and full["rc"] == "0", full
            assert int(full["rank"]) == RANK and int(full["size"]) == SIZE, full
            self.appnum = full["appnum"]

    def kvsname(self):
        if self.version == 1:
            return self.ask("get_my_kvsname")["kvsname"]
        return self.ask("job-getid")["jobid"]

    def put(self, key, value):
        if self.version == 1:
            answer = self.ask("put", kvsname=self.kvsname(), key=key, value=value)
        else:
            answer = self.ask("kvs-put", key=key, value=value)
        assert answer["rc"] == "0", answer

    def get(self, key):
        if self.version == 1:
            answer = self.ask("get", kvsname=self.kvsname(), key=key)
            return answer.get("value") if answer["rc"] == "0" else None
        answer = self.ask("kvs-get", jobid=self.kvsname(), srcid=-1, key=key)
        return answer.get("value") if answer.get("found") == "TRUE" else None

    def barrier(self):
        answer = self.ask("barrier_in" if self.version == 1 else "kvs-fence")
        assert answer["rc"] == "0", answer

    def mapping(self):
        if self.version == 1:
            return self.get("PMI_process_mapping")
        return self.ask("info-getjobattr", key="PMI_process_mapping").get("value")

    def finalize(self):
        answer = self.ask("finalize")
        assert answer["rc"] == "0", answer


def say(text):
    os.write(1, f"pmi_client rank {RANK}: {text}\n".encode())


def main():
    version = 1 if sys.argv[1] == "v1" else 2
    mode = sys.argv[2]
    pmi = Pmi(version)
    if mode == "exchange":
        pmi.init()
        pmi.put(f"card-{RANK}", f"addr-{RANK}-{'x' * 40}")
        pmi.barrier()
        missing = [r for r in range(SIZE) if pmi.get(f"card-{r}") != f"addr-{r}-{'x' * 40}"]
        mapping = pmi.mapping()
        pmi.barrier()
        pmi.finalize()
        say(f"v{version} {SIZE} ranks, mapping {mapping}, " + ("OK" if not missing else f"missing {missing}"))
        return 0 if not missing else 1
    if mode == "bad":
        kind = sys.argv[3]
        if kind == "get-before-init":
            answer = pmi.ask("get", kvsname="x", key="y") if version == 1 else pmi.ask("kvs-get", key="y")
        else:
            pmi.init()
            if kind == "oversized":
                pmi.send("put", kvsname=pmi.kvsname(), key="big", value="v" * (100 * 1024))
                try:
                    answer = pmi.receive(version == 2)
                except EOFError:
                    answer = {"closed": "yes"}
            elif kind == "unknown":
                answer = pmi.ask("teleport", where="mars")
            elif kind == "put-after-finalize":
                pmi.finalize()
                answer = pmi.ask("put", kvsname="x", key="k", value="v") if version == 1 else \
                    pmi.ask("kvs-put", key="k", value="v")
        say(f"answer {answer}")
        return 0 if answer.get("rc", "0") != "0" else 1
    if mode == "close-in-barrier":
        pmi.init()
        if RANK == int(sys.argv[3]):
            pmi.send("barrier_in" if version == 1 else "kvs-fence")
            os.close(FD)
            time.sleep(30)
            return 0
        pmi.barrier()
        pmi.finalize()
        return 0
    if mode == "abort":
        pmi.init()
        if RANK == int(sys.argv[3]):
            if version == 1:
                pmi.send("abort", exitcode=sys.argv[4])
            else:
                pmi.send("abort", isworld="TRUE", msg=f"rank {RANK} gives up")
            time.sleep(30)
            return 0
        pmi.barrier()
        return 0
    if mode == "flood":
        puts, size, barriers = (int(arg) for arg in sys.argv[3:6])
        pmi.init()
        kvsname = pmi.kvsname()
        value = "v" * size
        for i in range(puts):
            key = f"r{RANK}-{i}"
            if version == 1:
                answer = pmi.ask("put", kvsname=kvsname, key=key, value=value)
            else:
                answer = pmi.ask("kvs-put", key=key, value=value)
            if answer["rc"] != "0":
                say(f"put {i} refused: {answer}")
                time.sleep(60)   # the job must end without this rank's help
                return 3
            if barriers and (i + 1) % max(1, puts // barriers) == 0:
                pmi.barrier()
        pmi.finalize()
        say(f"put {puts} values of {size} bytes")
        return 0
    if mode == "appnum":
        pmi.init()
        appnum = pmi.ask("get_appnum")["appnum"] if version == 1 else pmi.appnum
        pmi.barrier()
        pmi.finalize()
        say(f"v{version} {sys.argv[3]} appnum {appnum}, PMI_APPNUM {os.environ.get('PMI_APPNUM')}")
        return 0
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    sys.exit(main())
