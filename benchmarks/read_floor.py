"""What one small TCP read costs a client on this machine with no client code around it: the
floor under benchmarks/client_ingest.py's per-token figures. A C program (built here with the
system's cc) forks a writer pinned to core 0 that sends one 230-byte event to each of C
loopback connections every --interval-ms, while the reader, pinned to core 1, reads them
as the receive loop does (edge-triggered epoll, recvmsg with a control buffer, SO_TIMESTAMPNS
on), and counts its own CPU (getrusage: user and system).

    python benchmarks/read_floor.py [--concurrency 256] [--interval-ms 20] [--rounds 200]

Prints the reader's CPU microseconds per read and per event, and reads per epoll wakeup. On
loopback a read also pays for the ACK it sends, delivered to the writer's socket in the
reader's own context.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

SOURCE = r"""
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9;
}
static void pin(int c) { cpu_set_t s; CPU_ZERO(&s); CPU_SET(c, &s); sched_setaffinity(0, sizeof s, &s); }
static double cpu(void) { struct rusage r; getrusage(RUSAGE_SELF, &r);
  return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6; }

int main(int argc, char **argv) {
  int n = atoi(argv[1]), interval_us = atoi(argv[2]), rounds = atoi(argv[3]), one = 1;
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0}; a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(0x7f000001);
  socklen_t al = sizeof a;
  bind(ls, (void *)&a, sizeof a); getsockname(ls, (void *)&a, &al); listen(ls, 4096);
  int *cs = malloc(n * sizeof(int)), *ss = malloc(n * sizeof(int));
  for (int i = 0; i < n; i++) {
    cs[i] = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(cs[i], SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    connect(cs[i], (void *)&a, sizeof a);
    ss[i] = accept(ls, 0, 0);
    setsockopt(ss[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(cs[i], F_SETFL, O_NONBLOCK);
  }
  char event[230]; memset(event, 'x', sizeof event);
  if (fork() == 0) {  /* the writer */
    pin(0);
    for (int r = 0; r < rounds; r++) {
      double t0 = now();
      for (int i = 0; i < n; i++) if (write(ss[i], event, sizeof event) < 0) _exit(1);
      double left = interval_us * 1e-6 - (now() - t0);
      if (left > 0) { struct timespec ts = {0, (long)(left * 1e9)}; nanosleep(&ts, 0); }
    }
    for (int i = 0; i < n; i++) shutdown(ss[i], SHUT_WR);
    _exit(0);
  }
  pin(1);
  int ep = epoll_create1(0);
  for (int i = 0; i < n; i++) {
    struct epoll_event e = {.events = EPOLLIN | EPOLLET | EPOLLRDHUP, .data.u32 = i};
    epoll_ctl(ep, EPOLL_CTL_ADD, cs[i], &e);
  }
  static char buf[65536], control[128];
  long reads = 0, bytes = 0, waits = 0; int open = n; struct epoll_event ev[256];
  double c0 = cpu();
  while (open) {
    int k = epoll_wait(ep, ev, 256, -1); waits++;
    for (int j = 0; j < k; j++) {
      int fd = cs[ev[j].data.u32];
      for (;;) {
        struct iovec io = {buf, sizeof buf}; struct msghdr m = {0};
        m.msg_iov = &io; m.msg_iovlen = 1; m.msg_control = control; m.msg_controllen = sizeof control;
        ssize_t got = recvmsg(fd, &m, 0);
        if (got > 0) {  /* a short read emptied the socket: later bytes raise a new edge */
          reads++; bytes += got;
          if (got < (ssize_t)sizeof buf && !(ev[j].events & EPOLLRDHUP)) break;
          continue;
        }
        if (got == 0) { open--; epoll_ctl(ep, EPOLL_CTL_DEL, fd, 0); }
        break;
      }
    }
  }
  double used = cpu() - c0;
  wait(0);
  printf("%ld %ld %ld %.6f\n", reads, bytes / (long)sizeof event, waits, used);
  return 0;
}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--interval-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    cc = shutil.which("cc") or shutil.which("gcc")
    if not sys.platform.startswith("linux") or cc is None or (os.cpu_count() or 1) < 2:
        sys.exit("read_floor: needs Linux, a C compiler and two cores")
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "floor.c"), os.path.join(d, "floor")
        with open(src, "w") as f:
            f.write(SOURCE)
        subprocess.run([cc, "-O2", "-o", exe, src], check=True)
        load = os.getloadavg()
        print(f"read_floor: C={a.concurrency}, one 230-byte event per connection every {a.interval_ms:g} ms, "
              f"{a.rounds} rounds; cpus={os.cpu_count()}, load average {load[0]:.2f}")
        per_event = []
        for _ in range(a.repeats):
            out = subprocess.run([exe, str(a.concurrency), str(int(a.interval_ms * 1000)), str(a.rounds)],
                                 check=True, capture_output=True, text=True).stdout.split()
            reads, events, waits, cpu_s = int(out[0]), int(out[1]), int(out[2]), float(out[3])
            per_event.append(cpu_s / events * 1e6)
            print(f"  reader CPU {cpu_s / reads * 1e6:5.2f} us per read, {per_event[-1]:5.2f} us per event "
                  f"({events / reads:.2f} events per read, {reads / waits:.1f} reads per wakeup)")
        per_event.sort()
        print(f"  median {per_event[len(per_event) // 2]:.2f} us per event: at most "
              f"{1e6 / per_event[len(per_event) // 2]:,.0f} events per CPU-second for any client reading "
              f"one event per read here")


if __name__ == "__main__":
    main()
