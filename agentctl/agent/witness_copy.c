/* The stdio witness's byte relay, compiled: one direction copied from fd to fd with the interpreter lock released,
 * each chunk also written whole to a tap that the witness reads at its own pace.
 *
 * Why C: a relay in Python wakes the interpreter twice per round trip (once per direction), and on a loaded
 * machine that wake-up is most of the witness's cost. Here the round trip never waits on Python; what the witness
 * reads of the stream comes through the tap, off the round trip's way.
 *
 * The tap keeps the witness's order guarantee: a chunk of the agent's reaches the tap before the server, so a
 * request is in the tap before the server can have read it, and so before any answer to it. The server's bytes
 * go to the tap only while the witness may await an answer (see the gate). A tap that fails (its reader gone) is
 * dropped and the relay goes on: observing never costs the link.
 *
 * Python's limited API only (abi3): one build serves every CPython from 3.11 on.
 */
#define _GNU_SOURCE 1 /* splice(2); Python.h defines it the same way */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Why the copy ended; the same names in Python (agentctl/agent/witness_relay.py). */
enum { END_SOURCE = 0, END_SOURCE_ERROR = 1, END_DESTINATION = 2 };
/* Which direction a copy is: the agent's (tapped before it goes on, and counted in the gate) or the server's
 * (tapped after it went on, not at all while the gate is open). */
enum { AGENT_SIDE = 0, SERVER_SIDE = 1 };

/* The gate between one link's two copies: the count of the agent's bytes tapped so far, shifted left one bit, and
 * in that bit whether the server's side may go untapped. The reader opens it only for the exact count it has read
 * with no answer awaited; every chunk of the agent's closes it before it goes on. So while it is open the server
 * has been sent nothing the reader has not seen, and nothing it writes can be an awaited answer. */
#define GATE_NAME "agentctl.agent.witness_copy.gate"
#define SKIP 1ULL

static void gate_free(PyObject *capsule) { free(PyCapsule_GetPointer(capsule, GATE_NAME)); }

static unsigned long long *gate_of(PyObject *capsule) {
    return (unsigned long long *)PyCapsule_GetPointer(capsule, GATE_NAME);
}

PyDoc_STRVAR(gate_doc, "gate() -> a new gate, closed, for one link's two copies.");

static PyObject *relay_gate(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    unsigned long long *word = malloc(sizeof *word);
    if (word == NULL) return PyErr_NoMemory();
    __atomic_store_n(word, 0ULL, __ATOMIC_SEQ_CST);
    PyObject *capsule = PyCapsule_New(word, GATE_NAME, gate_free);
    if (capsule == NULL) free(word);
    return capsule;
}

PyDoc_STRVAR(open_doc,
"open_gate(gate, seen) -> bool\n\n"
"Let the server's side go untapped, if the agent's side has tapped exactly `seen` bytes (taken mod 2**63) since\n"
"the gate was made; false (and the gate stays as it was) when more came meanwhile.");

static PyObject *relay_open_gate(PyObject *self, PyObject *args) {
    PyObject *capsule;
    unsigned long long seen;
    (void)self;
    if (!PyArg_ParseTuple(args, "OK", &capsule, &seen)) return NULL;
    unsigned long long *word = gate_of(capsule);
    if (word == NULL) return NULL;
    unsigned long long closed = seen << 1;
    unsigned long long open = closed | SKIP;
    if (__atomic_compare_exchange_n(word, &closed, open, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) Py_RETURN_TRUE;
    if (closed == open) Py_RETURN_TRUE; /* already open at that count */
    Py_RETURN_FALSE;
}

static int write_all(int fd, const char *data, size_t size) {
    while (size > 0) {
        ssize_t wrote = write(fd, data, size);
        if (wrote < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        data += wrote;
        size -= (size_t)wrote;
    }
    return 0;
}

/* The server's side goes to the tap in frames: this header, then `length` bytes of the chunk. `horizon` is the
 * count of the agent's bytes tapped when the chunk was read from the server: a request that ended past it had not
 * reached the server then, so nothing in the chunk answers it (whatever id a line carries). RESUMED: bytes went by
 * untapped before this frame, whose bytes start a line; a part line the reader holds is no line. */
struct frame {
    unsigned long long horizon;
    unsigned int length;
    unsigned int flags;
};
#define RESUMED 1U

static int write_frame(int tap, unsigned long long horizon, unsigned int flags, const char *data, size_t size) {
    struct frame head = {.horizon = horizon, .length = (unsigned int)size, .flags = flags};
    if (write_all(tap, (const char *)&head, sizeof head) < 0) return -1;
    return size > 0 ? write_all(tap, data, size) : 0;
}

static void close_gate(unsigned long long *word, size_t tapped) {
    unsigned long long old = __atomic_load_n(word, __ATOMIC_SEQ_CST);
    unsigned long long new;
    do {
        new = ((old >> 1) + tapped) << 1;
    } while (!__atomic_compare_exchange_n(word, &old, new, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
}

/* What of a chunk of the server's goes to the tap once the gate closed again after some went untapped: nothing
 * of the line that was under way (it began with no answer awaited), then everything from the next line on.
 * Returns where the tapped part starts, or `got` for none. */
static size_t resume_at(const char *buf, size_t got, int *seeking) {
    if (!*seeking) return 0;
    const char *newline = memchr(buf, '\n', got);
    if (newline == NULL) return got;
    *seeking = 0;
    return (size_t)(newline - buf) + 1;
}

/* The server's side while the gate is open: what its pipe held when the gate was seen open cannot be an awaited
 * answer (it was written before the server got any request the reader has not seen), so all but the last byte of
 * it move pipe to pipe in the kernel, never copied; the caller reads that last byte, so it knows where a line
 * starts again. Returns the bytes moved; 0 to read instead; -1 when `dst` refused; -2 when these two descriptors
 * take no splice (then never again). */
static ssize_t splice_unread(int src, int dst, unsigned long long *word) {
    /* Closed: an answer may be coming, so no poll or count on its way; it is read at once. */
    if (!(__atomic_load_n(word, __ATOMIC_SEQ_CST) & SKIP)) return 0;
    struct pollfd ready = {.fd = src, .events = POLLIN, .revents = 0};
    while (poll(&ready, 1, -1) < 0) {
        if (errno != EINTR) return 0;
    }
    int held = 0;
    if (ioctl(src, FIONREAD, &held) < 0 || held < 2) return 0;
    /* Seen open after the bytes were counted: they were written before any request it has not seen. */
    if (!(__atomic_load_n(word, __ATOMIC_SEQ_CST) & SKIP)) return 0;
    ssize_t moved = splice(src, NULL, dst, NULL, (size_t)held - 1, SPLICE_F_MOVE);
    if (moved >= 0) return moved;
    if (errno == EINVAL) return -2;
    return errno == EINTR || errno == EAGAIN ? 0 : -1;
}

PyDoc_STRVAR(copy_doc,
"copy(src, dst, tap, side, chunk, gate) -> (end, tap_ok)\n\n"
"Copy `src` to `dst` as bytes arrive until `src` ends (end 0), fails (1) or `dst` refuses a write (2). Each\n"
"chunk also goes to `tap` (-1 for none): the agent's side (0) whole, before `dst`, counted in `gate`; the server's\n"
"side (1) after `dst`, in frames (a 16-byte header: horizon u64, length u32, flags u32), and not while `gate` is\n"
"open.\n"
"`tap_ok` is false when the tap failed and was dropped. The interpreter lock is released for the whole copy.");

static PyObject *relay_copy(PyObject *self, PyObject *args) {
    int src, dst, tap, side;
    Py_ssize_t chunk;
    PyObject *capsule;
    (void)self;
    if (!PyArg_ParseTuple(args, "iiiinO", &src, &dst, &tap, &side, &chunk, &capsule)) return NULL;
    if (chunk <= 0 || chunk > (1 << 26)) {
        PyErr_SetString(PyExc_ValueError, "chunk must be between 1 byte and 64 MiB");
        return NULL;
    }
    if (side != AGENT_SIDE && side != SERVER_SIDE) {
        PyErr_SetString(PyExc_ValueError, "side must be 0 (the agent's) or 1 (the server's)");
        return NULL;
    }
    unsigned long long *word = gate_of(capsule);
    if (word == NULL) return NULL;
    char *buf = malloc((size_t)chunk);
    if (buf == NULL) return PyErr_NoMemory();
    int end = END_SOURCE;
    int tap_ok = 1;
    int untapped = 0; /* the server's side: bytes went by untapped since the last tapped chunk */
    int seeking = 0;  /* the server's side: the tap resumes at the next line */
    char last = '\n';
    int splicing = side == SERVER_SIDE;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        if (splicing && tap >= 0) {
            ssize_t moved = splice_unread(src, dst, word);
            if (moved == -2) splicing = 0;
            if (moved == -1) {
                end = END_DESTINATION;
                break;
            }
            if (moved > 0) {
                ssize_t one;
                while ((one = read(src, buf, 1)) < 0 && errno == EINTR) {
                }
                if (one <= 0) { /* one of the bytes counted is left: only a failure takes it */
                    end = END_SOURCE_ERROR;
                    break;
                }
                if (write_all(dst, buf, 1) < 0) {
                    end = END_DESTINATION;
                    break;
                }
                untapped = 1;
                last = buf[0];
                continue;
            }
        }
        ssize_t got = read(src, buf, (size_t)chunk);
        if (got < 0) {
            if (errno == EINTR) continue;
            end = END_SOURCE_ERROR;
            break;
        }
        if (got == 0) break;
        /* The gate as it was with these bytes in hand, before the agent can see them and answer. */
        unsigned long long seen = side == SERVER_SIDE ? __atomic_load_n(word, __ATOMIC_SEQ_CST) : 0;
        if (side == AGENT_SIDE) {
            if (tap >= 0 && write_all(tap, buf, (size_t)got) < 0) {
                tap = -1;
                tap_ok = 0;
            }
            close_gate(word, tap >= 0 ? (size_t)got : 0);
        }
        if (write_all(dst, buf, (size_t)got) < 0) {
            end = END_DESTINATION;
            break;
        }
        if (side == SERVER_SIDE && tap >= 0) {
            if (seen & SKIP) {
                untapped = 1;
                last = buf[got - 1];
                continue;
            }
            unsigned int flags = 0;
            if (untapped) {
                untapped = 0;
                seeking = last != '\n';
                flags = RESUMED;
            }
            size_t from = resume_at(buf, (size_t)got, &seeking);
            if ((from < (size_t)got || flags) &&
                write_frame(tap, seen >> 1, flags, buf + from, (size_t)got - from) < 0) {
                tap = -1;
                tap_ok = 0;
            }
        }
    }
    Py_END_ALLOW_THREADS
    free(buf);
    return Py_BuildValue("(iO)", end, tap_ok ? Py_True : Py_False);
}

static PyMethodDef relay_methods[] = {
    {"copy", relay_copy, METH_VARARGS, copy_doc},
    {"gate", relay_gate, METH_NOARGS, gate_doc},
    {"open_gate", relay_open_gate, METH_VARARGS, open_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef relay_module = {
    PyModuleDef_HEAD_INIT, "witness_copy", "The stdio witness's byte relay, compiled (see copy).", -1, relay_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_witness_copy(void) { return PyModule_Create(&relay_module); }
