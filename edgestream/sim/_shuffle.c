/* edgestream.sim._shuffle: numpy's default_rng(key).permutation(n) for many keys in one call.

The simulator's small-shard epoch orders (edgestream/sim/orders.py) need one permutation of n <= 32
positions per device and epoch. The SeedSequence words of each key are computed vectorised in numpy
(orders.seed_words); this file does the rest exactly as numpy does it:

  * PCG64 seeded from the words (pcg64_set_seed: inc = (w2:w3 << 1) | 1, state = ((inc + w0:w1) * M
    + inc)), stepped before each output (state = state * M + inc), output XSL-RR (the 64-bit
    (hi ^ lo) rotated right by state >> 122);
  * Generator.shuffle's Fisher-Yates on arange(n): i from n - 1 down to 1, j = random_interval(i):
    masked rejection with 32-bit draws (the low half of a 64-bit output first, then its high half,
    numpy's buffered next_uint32) while i fits in 32 bits.

orders.permutation is the same algorithm in Python integers (the fallback when this extension is not
built); tests compare both with numpy itself. Optional: setup.py builds it when a C compiler exists.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#if defined(__SIZEOF_INT128__)
typedef unsigned __int128 u128;
#define HAVE_U128 1
#endif

#ifdef HAVE_U128
static const uint64_t MULT_HI = 0x2360ED051FC65DA4ULL, MULT_LO = 0x4385DF649FCCF645ULL;

/* permutations(words, n, out): words is a C-contiguous buffer of E x 4 uint64 (orders.seed_words),
   out a writable C-contiguous buffer of E x n int64; row e of out becomes the permutation of key e. */
static PyObject *permutations(PyObject *self, PyObject *args) {
    Py_buffer words, out;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y*nw*", &words, &n, &out))
        return NULL;
    PyObject *result = NULL;
    if (n < 1 || n > (Py_ssize_t)0xFFFFFFFFLL) {
        PyErr_Format(PyExc_ValueError, "permutations: n must be in [1, 2^32], got %zd", n);
        goto done;
    }
    if (words.len % 32 != 0) {
        PyErr_SetString(PyExc_ValueError, "permutations: words must hold rows of 4 uint64");
        goto done;
    }
    Py_ssize_t rows = words.len / 32;
    if (out.len != rows * n * 8) {
        PyErr_Format(PyExc_ValueError, "permutations: out must hold %zd x %zd int64 (%zd bytes), has %zd bytes",
                     rows, n, rows * n * 8, out.len);
        goto done;
    }
    const uint64_t *w = (const uint64_t *)words.buf;
    int64_t *o = (int64_t *)out.buf;
    const u128 mult = ((u128)MULT_HI << 64) | MULT_LO;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t e = 0; e < rows; e++) {
        const uint64_t *k = w + 4 * e;
        u128 inc = ((((u128)k[2] << 64) | k[3]) << 1) | 1;
        u128 state = (inc + (((u128)k[0] << 64) | k[1])) * mult + inc;
        int64_t *arr = o + e * n;
        for (Py_ssize_t i = 0; i < n; i++)
            arr[i] = i;
        int spare_ok = 0;
        uint32_t spare = 0;
        for (Py_ssize_t i = n - 1; i > 0; i--) {
            uint64_t mask = (uint64_t)i;
            mask |= mask >> 1; mask |= mask >> 2; mask |= mask >> 4;
            mask |= mask >> 8; mask |= mask >> 16; mask |= mask >> 32;
            uint64_t value;
            for (;;) {
                if (!spare_ok) {
                    state = state * mult + inc;
                    uint64_t x = (uint64_t)(state >> 64) ^ (uint64_t)state;
                    unsigned rot = (unsigned)(state >> 122);
                    uint64_t r = (x >> rot) | (x << ((64 - rot) & 63));
                    value = r & 0xFFFFFFFFULL;
                    spare = (uint32_t)(r >> 32);
                    spare_ok = 1;
                } else {
                    value = spare;
                    spare_ok = 0;
                }
                value &= mask;
                if (value <= (uint64_t)i)
                    break;
            }
            int64_t t = arr[i];
            arr[i] = arr[value];
            arr[value] = t;
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&words);
    PyBuffer_Release(&out);
    return result;
}
#endif

static PyMethodDef methods[] = {
#ifdef HAVE_U128
    {"permutations", permutations, METH_VARARGS,
     "permutations(words, n, out) -> None: row e of out (E x n int64) = default_rng(key e).permutation(n), "
     "from key e's SeedSequence words (E x 4 uint64)"},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_shuffle",
                                    "numpy's PCG64 permutations for many seed keys in one call", -1, methods};

PyMODINIT_FUNC PyInit__shuffle(void) {
    return PyModule_Create(&module);
}
