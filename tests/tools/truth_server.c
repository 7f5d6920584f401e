/* truth_server: an OpenAI-compatible streaming server that keeps its own time, for checking the
 * timing of an LLM benchmark client against an independent clock (docs/metrics.md, "Timing error").
 *
 * Plain C11 and POSIX/Linux (epoll, timerfd); it shares no code with plumb, so an error in plumb's
 * client, clock or HTTP stack cannot hide here. One thread: epoll for sockets plus one timerfd armed
 * at the earliest due event of a binary heap, so thousands of concurrent streams cost a few
 * microseconds of work per event.
 *
 * Endpoints: POST /v1/chat/completions, POST /v1/completions (stream or not; "max_tokens",
 * "stream", "stream_options.include_usage" honoured), GET /health, GET /v1/models.
 *
 * Schedule: request r (id: the X-Request-Id header, else "b" + FNV-1a-64 of the body in hex) draws
 * its TTFT and its inter-token gaps from a generator seeded with (--seed, id), so a request gets the
 * same schedule whatever order it arrives in. Token k (k = 0 .. max_tokens-1) is due at
 * recv_last + ttft + sum of gaps 1..k (planned times, so lateness never accumulates).
 *
 * Stamps (--stamps FILE, one JSON line per finished request; CLOCK_MONOTONIC nanoseconds, the clock
 * std::chrono::steady_clock reads on Linux):
 *   recv_first  the read() that returned the request's first byte had returned
 *   recv_last   the read() that completed the request (head and Content-Length body) had returned
 *   arrive_last the kernel's receive time of the segment holding the request's last byte
 *               (SO_TIMESTAMPNS, CLOCK_REALTIME moved onto CLOCK_MONOTONIC; 0 when not reported):
 *               unlike recv_last it does not include this server's own wake-up latency
 *   head        the response head (and, for chat, the role-only delta) was written
 *   chunks[k]   the write() of content chunk k had returned, all of it accepted by the kernel
 *   done        the write() of the usage chunk, data: [DONE] and the final HTTP chunk had returned
 * plus conn (connection number), conn_req (requests before it on that connection), accepted (when
 * its connection was accepted) and the planned ttft and gaps.
 *
 * Usage: truth_server [--host 127.0.0.1] [--port 0] [--port-file F] [--stamps F] [--seed N]
 *                     [--ttft DIST] [--itl DIST] [--realtime PRIO]
 * --port 0 picks a free port; --port-file gets it (written atomically once listening).
 * --realtime PRIO: SCHED_FIFO at PRIO where permitted, so other load on the machine does not delay
 * the schedule or the stamps (a warning and a normal process otherwise).
 * DIST (milliseconds): const:A | uniform:A:B | exp:MEAN | normal:MEAN:SD (clamped at 0).
 * Default: --ttft const:20 --itl const:2. SIGTERM/SIGINT: finish writing stamps and exit 0.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

typedef int64_t ns_t;

static ns_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (ns_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* A CLOCK_REALTIME stamp (what SO_TIMESTAMPNS gives) moved onto CLOCK_MONOTONIC by the current
 * offset between the two clocks, read as a pair (tens of nanoseconds apart). */
static ns_t realtime_to_mono(const struct timespec* rt) {
  struct timespec r, m;
  clock_gettime(CLOCK_REALTIME, &r);
  clock_gettime(CLOCK_MONOTONIC, &m);
  ns_t off = ((ns_t)r.tv_sec - m.tv_sec) * 1000000000LL + (r.tv_nsec - m.tv_nsec);
  return (ns_t)rt->tv_sec * 1000000000LL + rt->tv_nsec - off;
}

/* ---- seeded schedule ---- */

enum dist_kind { D_CONST, D_UNIFORM, D_EXP, D_NORMAL };
struct dist {
  enum dist_kind kind;
  double a, b; /* ms */
};

static uint64_t splitmix(uint64_t* s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
static double unit(uint64_t* s) { return (double)(splitmix(s) >> 11) * (1.0 / 9007199254740992.0); }

static ns_t draw(const struct dist* d, uint64_t* s) {
  double ms = 0;
  switch (d->kind) {
    case D_CONST:
      ms = d->a;
      break;
    case D_UNIFORM:
      ms = d->a + (d->b - d->a) * unit(s);
      break;
    case D_EXP:
      ms = -d->a * log(1.0 - unit(s));
      break;
    case D_NORMAL: {
      double u1 = unit(s), u2 = unit(s);
      ms = d->a + d->b * sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
      break;
    }
  }
  if (ms < 0) ms = 0;
  return (ns_t)(ms * 1e6);
}

static int parse_dist(const char* s, struct dist* d) {
  d->a = d->b = 0;
  if (sscanf(s, "const:%lf", &d->a) == 1)
    d->kind = D_CONST;
  else if (sscanf(s, "uniform:%lf:%lf", &d->a, &d->b) == 2)
    d->kind = D_UNIFORM;
  else if (sscanf(s, "exp:%lf", &d->a) == 1)
    d->kind = D_EXP;
  else if (sscanf(s, "normal:%lf:%lf", &d->a, &d->b) == 2)
    d->kind = D_NORMAL;
  else
    return -1;
  return d->a >= 0 && d->b >= 0 ? 0 : -1;
}

static uint64_t fnv1a(const char* p, size_t n, uint64_t h) {
  for (size_t i = 0; i < n; ++i) h = (h ^ (unsigned char)p[i]) * 0x100000001B3ULL;
  return h;
}

/* ---- connections ---- */

enum state { S_READ, S_STREAM, S_CLOSING };
enum kind { K_CHAT, K_COMPLETIONS };

struct conn {
  int fd;
  long num;      /* connection number */
  long nreq;     /* requests finished on it */
  ns_t accepted; /* accept() returned */
  enum state st;
  char* in;
  size_t in_len, in_cap;
  char* out; /* bytes the kernel has not taken yet */
  size_t out_len, out_cap;
  /* the request being served */
  char id[96];
  char path[64];
  enum kind kind;
  int stream, include_usage;
  long max_tokens;
  ns_t recv_first, recv_last, head, done;
  ns_t arrive_last;      /* kernel receive time of the request's last byte (SO_TIMESTAMPNS), 0 unknown */
  ns_t last_read_kernel; /* kernel receive time of the newest bytes read, 0 unknown */
  ns_t* chunks;          /* write stamps, max_tokens of them */
  ns_t* plan;            /* planned gap before each token (plan[0] = ttft) */
  long next_token;       /* tokens written so far */
  ns_t due;              /* when the next event is due */
  long heap_idx;         /* position in the timer heap, -1 when not in it */
  int pending_stamp;     /* a write is waiting for EPOLLOUT: stamp when it drains (-1 none, else token, or -2
                            done) */
};

static struct {
  int ep, tfd, lfd;
  FILE* stamps;
  uint64_t seed;
  struct dist ttft, itl;
  struct conn** heap;
  long heap_len, heap_cap;
  long conns;
  ns_t armed;
} g;

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

static void die(const char* what) {
  perror(what);
  exit(2);
}

/* ---- timer heap (earliest due at the top) ---- */

static void heap_swap(long i, long j) {
  struct conn* t = g.heap[i];
  g.heap[i] = g.heap[j];
  g.heap[j] = t;
  g.heap[i]->heap_idx = i;
  g.heap[j]->heap_idx = j;
}
static void heap_up(long i) {
  while (i > 0) {
    long p = (i - 1) / 2;
    if (g.heap[p]->due <= g.heap[i]->due) break;
    heap_swap(i, p);
    i = p;
  }
}
static void heap_down(long i) {
  for (;;) {
    long l = 2 * i + 1, r = l + 1, m = i;
    if (l < g.heap_len && g.heap[l]->due < g.heap[m]->due) m = l;
    if (r < g.heap_len && g.heap[r]->due < g.heap[m]->due) m = r;
    if (m == i) return;
    heap_swap(i, m);
    i = m;
  }
}
static void heap_push(struct conn* c) {
  if (g.heap_len == g.heap_cap) {
    g.heap_cap = g.heap_cap ? 2 * g.heap_cap : 1024;
    g.heap = realloc(g.heap, (size_t)g.heap_cap * sizeof *g.heap);
    if (!g.heap) die("realloc");
  }
  c->heap_idx = g.heap_len;
  g.heap[g.heap_len++] = c;
  heap_up(c->heap_idx);
}
static void heap_remove(struct conn* c) {
  long i = c->heap_idx;
  if (i < 0) return;
  c->heap_idx = -1;
  g.heap_len--;
  if (i == g.heap_len) return;
  g.heap[i] = g.heap[g.heap_len];
  g.heap[i]->heap_idx = i;
  heap_up(i);
  heap_down(g.heap[i]->heap_idx);
}

static void arm_timer(void) {
  ns_t t = g.heap_len ? g.heap[0]->due : 0;
  if (t == g.armed) return;
  struct itimerspec its;
  memset(&its, 0, sizeof its);
  if (t > 0) {
    its.it_value.tv_sec = t / 1000000000LL;
    its.it_value.tv_nsec = t % 1000000000LL;
  }
  if (timerfd_settime(g.tfd, TFD_TIMER_ABSTIME, &its, NULL) != 0) die("timerfd_settime");
  g.armed = t;
}

/* ---- output ---- */

static void close_conn(struct conn* c) {
  heap_remove(c);
  epoll_ctl(g.ep, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  free(c->in);
  free(c->out);
  free(c->chunks);
  free(c->plan);
  free(c);
}

static void want_out(struct conn* c, int on) {
  struct epoll_event ev;
  ev.events = EPOLLIN | EPOLLRDHUP | (on ? EPOLLOUT : 0);
  ev.data.ptr = c;
  epoll_ctl(g.ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void out_append(struct conn* c, const char* p, size_t n) {
  if (c->out_len + n > c->out_cap) {
    c->out_cap = (c->out_len + n) * 2;
    c->out = realloc(c->out, c->out_cap);
    if (!c->out) die("realloc");
  }
  memcpy(c->out + c->out_len, p, n);
  c->out_len += n;
}

/* Writes what is queued plus p[0..n). Returns 1 when everything was accepted by the kernel, 0 when
 * some is left for EPOLLOUT, -1 when the peer is gone. */
static int send_bytes(struct conn* c, const char* p, size_t n) {
  if (n) out_append(c, p, n);
  size_t off = 0;
  while (off < c->out_len) {
    ssize_t w = write(c->fd, c->out + off, c->out_len - off);
    if (w > 0) {
      off += (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return -1;
  }
  memmove(c->out, c->out + off, c->out_len - off);
  c->out_len -= off;
  if (c->out_len) {
    want_out(c, 1);
    return 0;
  }
  return 1;
}

/* One HTTP chunk holding one SSE event. */
static size_t sse_chunk(char* buf, size_t cap, const char* data) {
  char ev[1024];
  int n = snprintf(ev, sizeof ev, "data: %s\n\n", data);
  return (size_t)snprintf(buf, cap, "%x\r\n%s\r\n", n, ev);
}

static void write_stamps(struct conn* c) {
  if (!g.stamps) return;
  FILE* f = g.stamps;
  fprintf(
      f,
      "{\"id\":\"%s\",\"path\":\"%s\",\"conn\":%ld,\"conn_req\":%ld,\"accepted\":%lld,\"recv_first\":%lld,"
      "\"recv_last\":%lld,\"arrive_last\":%lld,\"head\":%lld,\"max_tokens\":%ld,\"stream\":%s,\"tokens_"
      "written\":%ld,\"done\":%lld,"
      "\"chunks\":[",
      c->id, c->path, c->num, c->nreq, (long long)c->accepted, (long long)c->recv_first,
      (long long)c->recv_last, (long long)c->arrive_last, (long long)c->head, c->max_tokens,
      c->stream ? "true" : "false", c->next_token, (long long)c->done);
  for (long k = 0; k < c->next_token; ++k) fprintf(f, "%s%lld", k ? "," : "", (long long)c->chunks[k]);
  fprintf(f, "],\"plan_ns\":[");
  for (long k = 0; k < c->max_tokens; ++k) fprintf(f, "%s%lld", k ? "," : "", (long long)c->plan[k]);
  fprintf(f, "]}\n");
  fflush(f);
}

static void token_text(const struct conn* c, long k, char* buf, size_t cap) {
  /* One word per token, so a words-based re-count agrees with the usage. */
  if (c->kind == K_CHAT)
    snprintf(buf, cap,
             "{\"id\":\"cmpl-truth\",\"object\":\"chat.completion.chunk\",\"model\":\"truth\",\"choices\":[{"
             "\"index\":0,\"delta\":{\"content\":\" t%ld\"},\"finish_reason\":%s}]}",
             k, k + 1 == c->max_tokens ? "\"length\"" : "null");
  else
    snprintf(buf, cap,
             "{\"id\":\"cmpl-truth\",\"object\":\"text_completion\",\"model\":\"truth\",\"choices\":[{"
             "\"index\":0,\"text\":\" t%ld\",\"finish_reason\":%s}]}",
             k, k + 1 == c->max_tokens ? "\"length\"" : "null");
}

static void reset_request(struct conn* c) {
  c->st = S_READ;
  free(c->chunks);
  free(c->plan);
  c->chunks = c->plan = NULL;
  c->next_token = 0;
  c->pending_stamp = -1;
  c->nreq++;
}

static int handle_input(struct conn* c);

/* The request is answered: stamps out, ready for the next one on this connection. */
static void finish_request(struct conn* c) {
  write_stamps(c);
  reset_request(c);
  if (c->in_len) handle_input(c); /* a pipelined request */
}

static void fail_conn(struct conn* c) { close_conn(c); }

/* Writes the end of a streamed response; stamps `done` when the kernel has taken it. */
static void stream_end(struct conn* c) {
  char buf[1200], usage[256];
  size_t n = 0;
  if (c->include_usage) {
    snprintf(usage, sizeof usage,
             "{\"id\":\"cmpl-truth\",\"object\":\"%s\",\"model\":\"truth\",\"choices\":[],\"usage\":{"
             "\"prompt_tokens\":0,\"completion_tokens\":%ld,\"total_tokens\":%ld}}",
             c->kind == K_CHAT ? "chat.completion.chunk" : "text_completion", c->max_tokens, c->max_tokens);
    n += sse_chunk(buf + n, sizeof buf - n, usage);
  }
  n += sse_chunk(buf + n, sizeof buf - n, "[DONE]");
  n += (size_t)snprintf(buf + n, sizeof buf - n, "0\r\n\r\n");
  int r = send_bytes(c, buf, n);
  if (r < 0) return fail_conn(c);
  if (r == 0) {
    c->pending_stamp = -2;
    return;
  }
  c->done = now_ns();
  finish_request(c);
}

static void whole_response(struct conn* c) {
  char body[256 + 16 * 1024], hdr[256];
  size_t n = 0;
  body[0] = 0;
  const char* pre = c->kind == K_CHAT
                        ? "{\"id\":\"cmpl-truth\",\"object\":\"chat.completion\",\"model\":\"truth\","
                          "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\""
                        : "{\"id\":\"cmpl-truth\",\"object\":\"text_completion\",\"model\":\"truth\","
                          "\"choices\":[{\"index\":0,\"text\":\"";
  n += (size_t)snprintf(body + n, sizeof body - n, "%s", pre);
  for (long k = 0; k < c->max_tokens && n + 32 < sizeof body - 200; ++k)
    n += (size_t)snprintf(body + n, sizeof body - n, " t%ld", k);
  n += (size_t)snprintf(
      body + n, sizeof body - n,
      "\"%s,\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":%ld,"
      "\"total_tokens\":%ld}}",
      c->kind == K_CHAT ? "}" : "", c->max_tokens, c->max_tokens);
  int h = snprintf(hdr, sizeof hdr,
                   "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n", n);
  out_append(c, hdr, (size_t)h);
  int r = send_bytes(c, body, n);
  if (r < 0) return fail_conn(c);
  c->next_token = c->max_tokens;
  for (long k = 0; k < c->max_tokens; ++k) c->chunks[k] = now_ns();
  if (r == 0) {
    c->pending_stamp = -2;
    return;
  }
  c->done = c->head = now_ns();
  finish_request(c);
}

/* The next due event of a streaming request: one content chunk, then the end. */
static void on_due(struct conn* c) {
  if (!c->stream) return whole_response(c);
  char data[512], buf[700];
  token_text(c, c->next_token, data, sizeof data);
  size_t n = sse_chunk(buf, sizeof buf, data);
  long k = c->next_token++;
  int r = send_bytes(c, buf, n);
  if (r < 0) return fail_conn(c);
  if (r == 0) {
    c->pending_stamp = (int)k;
  } else {
    c->chunks[k] = now_ns();
  }
  if (c->next_token < c->max_tokens) {
    c->due += c->plan[c->next_token];
    heap_push(c);
    return;
  }
  if (r == 0) return; /* the end goes out once the last chunk has drained */
  stream_end(c);
}

static void simple_response(struct conn* c, int status, const char* ctype, const char* body) {
  char buf[1024];
  int n =
      snprintf(buf, sizeof buf, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n\r\n%s", status,
               status == 200   ? "OK"
               : status == 404 ? "Not Found"
                               : "Bad Request",
               ctype, strlen(body), body);
  if (send_bytes(c, buf, (size_t)n) < 0) return fail_conn(c);
  c->nreq++;
}

static const char* find_ci(const char* hay, size_t n, const char* needle) {
  size_t m = strlen(needle);
  for (size_t i = 0; i + m <= n; ++i)
    if (strncasecmp(hay + i, needle, m) == 0) return hay + i;
  return NULL;
}

/* Value after "key" and a colon in a JSON text (a key inside a string value is escaped, so an
 * unescaped "key" is a key). */
static const char* json_value(const char* body, size_t n, const char* key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\"", key);
  size_t m = strlen(pat);
  for (size_t i = 0; i + m <= n; ++i) {
    if (memcmp(body + i, pat, m) != 0) continue;
    const char* p = body + i + m;
    while (p < body + n && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) ++p;
    if (p < body + n && *p == ':') {
      ++p;
      while (p < body + n && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) ++p;
      return p;
    }
  }
  return NULL;
}

/* Parses and starts one request if a whole one is buffered. Returns 0 when more input is needed. */
static int handle_input(struct conn* c) {
  if (c->st != S_READ) return 0;
  char* end = memmem(c->in, c->in_len, "\r\n\r\n", 4);
  if (!end) return 0;
  size_t head_len = (size_t)(end - c->in) + 4;
  size_t body_len = 0;
  const char* cl = find_ci(c->in, head_len, "\r\ncontent-length:");
  if (cl) body_len = strtoul(cl + 17, NULL, 10);
  if (c->in_len < head_len + body_len) return 0;
  c->recv_last = now_ns();
  /* The newest bytes read completed the request unless a pipelined one follows; then the stamp
     is of those later bytes and is not used. */
  c->arrive_last = c->in_len == head_len + body_len ? c->last_read_kernel : 0;
  const char* body = c->in + head_len;

  char method[16] = {0};
  sscanf(c->in, "%15s %63s", method, c->path);
  const char* rid = find_ci(c->in, head_len, "\r\nx-request-id:");
  if (rid) {
    rid += 15;
    while (*rid == ' ') ++rid;
    size_t k = 0;
    while (rid[k] != '\r' && k + 1 < sizeof c->id && rid[k] != '"' && rid[k] != '\\') {
      c->id[k] = rid[k];
      ++k;
    }
    c->id[k] = 0;
  } else {
    snprintf(c->id, sizeof c->id, "b%016llx",
             (unsigned long long)fnv1a(body, body_len, 0xCBF29CE484222325ULL));
  }

  /* Consume this request's bytes now; a pipelined next one stays. */
  size_t used = head_len + body_len;
  int chat = strcmp(c->path, "/v1/chat/completions") == 0;
  int compl = strcmp(c->path, "/v1/completions") == 0;
  if (strcmp(method, "POST") == 0 && (chat || compl )) {
    const char* v = json_value(body, body_len, "max_tokens");
    c->max_tokens = v ? strtol(v, NULL, 10) : 16;
    if (c->max_tokens < 1) c->max_tokens = 1;
    if (c->max_tokens > 1000000) c->max_tokens = 1000000;
    v = json_value(body, body_len, "stream");
    c->stream = v && strncmp(v, "true", 4) == 0;
    v = json_value(body, body_len, "include_usage");
    c->include_usage = v && strncmp(v, "true", 4) == 0;
    c->kind = chat ? K_CHAT : K_COMPLETIONS;
    memmove(c->in, c->in + used, c->in_len - used);
    c->in_len -= used;

    c->chunks = calloc((size_t)c->max_tokens, sizeof *c->chunks);
    c->plan = calloc((size_t)c->max_tokens, sizeof *c->plan);
    if (!c->chunks || !c->plan) die("calloc");
    uint64_t s = g.seed ^ fnv1a(c->id, strlen(c->id), 0xCBF29CE484222325ULL);
    c->plan[0] = draw(&g.ttft, &s);
    for (long k = 1; k < c->max_tokens; ++k) c->plan[k] = draw(&g.itl, &s);
    c->st = S_STREAM;
    c->next_token = 0;
    c->done = 0;
    c->pending_stamp = -1;
    c->head = 0;
    if (c->stream) {
      char buf[600];
      int n = snprintf(buf, sizeof buf,
                       "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n");
      if (chat)
        n += (int)sse_chunk(buf + n, sizeof buf - (size_t)n,
                            "{\"id\":\"cmpl-truth\",\"object\":\"chat.completion.chunk\",\"model\":\"truth\","
                            "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
                            "\"finish_reason\":null}]}");
      int r = send_bytes(c, buf, (size_t)n);
      if (r < 0) {
        fail_conn(c);
        return -1;
      }
      c->head = now_ns();
    }
    c->due = c->recv_last + c->plan[0];
    if (!c->stream)
      for (long k = 1; k < c->max_tokens; ++k) c->due += c->plan[k];
    heap_push(c);
    return 1;
  }
  memmove(c->in, c->in + used, c->in_len - used);
  c->in_len -= used;
  if (strcmp(method, "GET") == 0 && strcmp(c->path, "/health") == 0) {
    simple_response(c, 200, "text/plain", "ok");
  } else if (strcmp(method, "GET") == 0 && strcmp(c->path, "/v1/models") == 0) {
    simple_response(
        c, 200, "application/json",
        "{\"object\":\"list\",\"data\":[{\"id\":\"truth\",\"object\":\"model\",\"owned_by\":\"truth\"}]}");
  } else {
    simple_response(c, 404, "application/json",
                    "{\"error\":{\"message\":\"not found\",\"type\":\"not_found\"}}");
  }
  return 1;
}

static void on_readable(struct conn* c) {
  for (;;) {
    if (c->in_cap - c->in_len < 4096) {
      c->in_cap = c->in_cap ? c->in_cap * 2 : 16384;
      c->in = realloc(c->in, c->in_cap);
      if (!c->in) die("realloc");
    }
    struct iovec iov = {c->in + c->in_len, c->in_cap - c->in_len};
    union {
      char buf[CMSG_SPACE(sizeof(struct timespec))];
      struct cmsghdr align;
    } ctl;
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof ctl.buf;
    ssize_t r = recvmsg(c->fd, &msg, 0);
    if (r > 0) {
      if (c->in_len == 0 && c->st == S_READ) c->recv_first = now_ns();
      c->in_len += (size_t)r;
      /* TCP reports the receive time of the newest segment this read consumed. */
      for (struct cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
          struct timespec ts;
          memcpy(&ts, CMSG_DATA(cm), sizeof ts);
          c->last_read_kernel = realtime_to_mono(&ts);
        }
      }
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return close_conn(c); /* EOF or error: the client went away */
  }
  while (c->st == S_READ && c->in_len) {
    int r = handle_input(c);
    if (r <= 0) break;
  }
}

static void on_writable(struct conn* c) {
  int r = send_bytes(c, NULL, 0);
  if (r < 0) return fail_conn(c);
  if (r == 0) return;
  want_out(c, 0);
  int p = c->pending_stamp;
  c->pending_stamp = -1;
  if (p >= 0) {
    c->chunks[p] = now_ns();
    if (c->next_token == c->max_tokens && c->heap_idx < 0) stream_end(c);
  } else if (p == -2) {
    c->done = now_ns();
    finish_request(c);
  }
}

static void on_accept(void) {
  for (;;) {
    int fd = accept4(g.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return; /* EAGAIN, or out of descriptors: try again on the next wake-up */
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    struct conn* c = calloc(1, sizeof *c);
    if (!c) die("calloc");
    c->fd = fd;
    c->num = g.conns++;
    c->accepted = now_ns();
    c->heap_idx = -1;
    c->pending_stamp = -1;
    struct epoll_event ev;
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.ptr = c;
    if (epoll_ctl(g.ep, EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll_ctl");
  }
}

static void run_due(void) {
  ns_t t = now_ns();
  while (g.heap_len && g.heap[0]->due <= t) {
    struct conn* c = g.heap[0];
    heap_remove(c);
    on_due(c);
    t = now_ns();
  }
}

int main(int argc, char** argv) {
  const char *host = "127.0.0.1", *port_file = NULL, *stamps = NULL;
  int port = 0, realtime = 0;
  g.seed = 1;
  parse_dist("const:20", &g.ttft);
  parse_dist("const:2", &g.itl);
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "truth_server: %s needs a value\n", a);
      return 2;
    }
    if (!strcmp(a, "--host"))
      host = v;
    else if (!strcmp(a, "--port"))
      port = atoi(v);
    else if (!strcmp(a, "--port-file"))
      port_file = v;
    else if (!strcmp(a, "--stamps"))
      stamps = v;
    else if (!strcmp(a, "--seed"))
      g.seed = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--realtime"))
      realtime = atoi(v);
    else if (!strcmp(a, "--ttft") && parse_dist(v, &g.ttft) == 0) {
    } else if (!strcmp(a, "--itl") && parse_dist(v, &g.itl) == 0) {
    } else {
      fprintf(stderr, "truth_server: bad argument %s %s (see the header of truth_server.c)\n", a, v);
      return 2;
    }
    ++i;
  }
  /* Timer wake-ups to the nanosecond rather than the default 50 us slack. */
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  if (realtime > 0) {
    struct sched_param sp;
    memset(&sp, 0, sizeof sp);
    sp.sched_priority = realtime;
    if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0)
      fprintf(stderr, "truth_server: --realtime %d: %s (running as a normal process)\n", realtime,
              strerror(errno));
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  /* The stop signals are delivered only inside epoll_pwait, so none is lost between checks. */
  sigset_t stop_set, run_set;
  sigemptyset(&stop_set);
  sigaddset(&stop_set, SIGTERM);
  sigaddset(&stop_set, SIGINT);
  sigprocmask(SIG_BLOCK, &stop_set, &run_set);
  sigdelset(&run_set, SIGTERM);
  sigdelset(&run_set, SIGINT);

  if (stamps) {
    g.stamps = fopen(stamps, "w");
    if (!g.stamps) die(stamps);
  }
  g.lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (g.lfd < 0) die("socket");
  int one = 1;
  setsockopt(g.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)port);
  if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
    fprintf(stderr, "truth_server: --host must be an IPv4 address\n");
    return 2;
  }
  if (bind(g.lfd, (struct sockaddr*)&addr, sizeof addr) != 0) die("bind");
  if (listen(g.lfd, 4096) != 0) die("listen");
  socklen_t alen = sizeof addr;
  getsockname(g.lfd, (struct sockaddr*)&addr, &alen);
  port = ntohs(addr.sin_port);

  g.ep = epoll_create1(EPOLL_CLOEXEC);
  g.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (g.ep < 0 || g.tfd < 0) die("epoll/timerfd");
  struct epoll_event ev;
  ev.events = EPOLLIN;
  ev.data.ptr = &g.lfd;
  epoll_ctl(g.ep, EPOLL_CTL_ADD, g.lfd, &ev);
  ev.data.ptr = &g.tfd;
  epoll_ctl(g.ep, EPOLL_CTL_ADD, g.tfd, &ev);

  if (port_file) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
    FILE* f = fopen(tmp, "w");
    if (!f) die(tmp);
    fprintf(f, "%d\n", port);
    fclose(f);
    if (rename(tmp, port_file) != 0) die("rename");
  }
  printf("truth_server listening on %s:%d\n", host, port);
  fflush(stdout);

  struct epoll_event evs[256];
  while (!g_stop) {
    run_due();
    arm_timer();
    int n = epoll_pwait(g.ep, evs, 256, -1, &run_set);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("epoll_wait");
    }
    for (int i = 0; i < n; ++i) {
      void* p = evs[i].data.ptr;
      if (p == &g.lfd) {
        on_accept();
      } else if (p == &g.tfd) {
        uint64_t x;
        ssize_t r = read(g.tfd, &x, sizeof x);
        (void)r;
        g.armed = 0;
      } else {
        struct conn* c = p;
        /* A connection closed earlier in this batch is not touched: events carry no stale pointers
           because closing happens only in on_readable/on_writable/on_due of the same connection,
           and each connection appears at most once per epoll_wait batch. */
        if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
          on_readable(c);
          continue; /* it may be closed now */
        }
        if (evs[i].events & EPOLLOUT) on_writable(c);
      }
    }
  }
  if (g.stamps) fclose(g.stamps);
  return 0;
}
