/* The consumer's hot loop in C: a batch of wire-format uint8 samples straight into normalised float32.
 *
 * u8_affine(values, ref, length, plane, scale, bias, out, headers) -> int
 *
 *   values   list of bytes (or of Kafka messages: their value()), each `length` bytes: a
 *            48-byte header, then the uint8 payload (a class-index message: no target bytes)
 *   ref      bytes: the header prefix (magic, version, dtype, ndim, target code, dims: 24 bytes) every value
 *            must start with -- the caller's validated layout (the run's dataset, or a first value)
 *   plane    payload elements per channel (the payload holds len(scale) channels of `plane` elements)
 *   scale,   float32 buffers of one value per channel
 *   bias
 *   out      writable float32 buffer of len(values) * len(scale) * plane elements, C order:
 *            out[i, c, j] = payload_i[c, j] * scale[c] + bias[c]
 *   headers  writable uint8 buffer of len(values) * 48 bytes: each value's header, copied so
 *            the caller validates labels and devices all at once (numpy)
 *
 * Returns -1, or the index of the first value that is not bytes of exactly `length` bytes or does not
 * start with `ref` (nothing is converted then); raises what a message's value() raised. The caller
 * validated `ref` against `length`; every value is then valid by equality. One pass over each message's bytes, with the GIL released: no joined copy of
 * the batch and no intermediate uint8 or unscaled float32 array. edgestream.data.wire falls back to
 * numpy when this module is not built; both give the same values (tests compare them).
 *
 * gather(values, ref, length, tbytes, plane, scale, bias, out, targets, labels, devices, seqs, times,
 *        lab_lo, lab_hi, dev_lo, dev_hi, stream=False) -> int
 *
 *   The consumer's validated decode in one call: every value is checked like u8_affine does (bytes
 *   of exactly `length`, starting with `ref`), its header fields are written to `labels` (int64: the
 *   i32 label field), `devices` (int64), `seqs` (uint64) and `times` (float64) -- buffers of
 *   len(values) elements -- and its label field must lie in [lab_lo, lab_hi) (a class index in
 *   [0, num_classes); for a float target, the one value that describes the run's target shape) and
 *   its device in [dev_lo, dev_hi). A value is a 48-byte header, the payload (length - 48 - tbytes
 *   bytes) and `tbytes` bytes of float target (wire version 2; 0 for a class index). The payload goes
 *   to `out`:
 *     scale, bias None: copied as it is (the wire's dtype; `plane` is ignored) -- out holds
 *                       len(values) * payload bytes: the batch a device normalises itself
 *     float32 buffers:  uint8 payloads normalised like u8_affine (out: float32, C order)
 *   and the target bytes to `targets` (None when tbytes is 0; else len(values) * tbytes bytes).
 *   stream (optional, default False): write the float32 batch with non-temporal stores (x86 SSE2;
 *                     elsewhere ignored) -- for batches bigger than the cache; the same values
 *   Returns -1 when every value passed, else the index of the first that did not (then `out` and the
 *   fields are partly written: the caller discards them and checks the values one by one). Little-
 *   endian hosts only (the header fields are read in place); elsewhere the module has no `gather`.
 *   The values are read in pieces of about GATHER_PIECE_BYTES (each Kafka message's value() is a fresh
 *   copy of its bytes): a piece's copies are made, read while they are still in the cache and freed
 *   before the next piece's are made, so a block of many batches costs per sample what one batch does
 *   (holding every copy of a 4 MB block made the allocator fault fresh pages in: 3x slower a sample).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define HEADER_SIZE 48
/* gather: the values held (and their copies alive) at a time, in bytes: about the L2 cache of a core */
#define GATHER_PIECE_BYTES (256 * 1024)

static PyObject *value_name; /* "value": the method of a Kafka message that returns its bytes */

static int get_buffer(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t want, const char *name) {
    if (PyObject_GetBuffer(obj, view, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->len != want) {
        PyErr_Format(PyExc_ValueError, "%s: need %zd bytes, got %zd", name, want, view->len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *u8_affine(PyObject *self, PyObject *args) {
    PyObject *values, *scale_obj, *bias_obj, *out_obj, *hdr_obj;
    const char *ref;
    Py_ssize_t ref_len, length, plane;
    const Py_ssize_t header_size = HEADER_SIZE;
    if (!PyArg_ParseTuple(args, "O!y#nnOOOO", &PyList_Type, &values, &ref, &ref_len, &length, &plane,
                          &scale_obj, &bias_obj, &out_obj, &hdr_obj))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(values);
    if (ref_len < 1 || ref_len > header_size || plane < 1 || length < header_size ||
        (length - header_size) % plane) {
        PyErr_SetString(PyExc_ValueError, "u8_affine: inconsistent header_size, length and plane");
        return NULL;
    }
    Py_ssize_t channels = (length - header_size) / plane;
    Py_buffer scale, bias, out, hdr;
    if (get_buffer(scale_obj, &scale, 0, channels * (Py_ssize_t)sizeof(float), "scale") < 0)
        return NULL;
    if (get_buffer(bias_obj, &bias, 0, channels * (Py_ssize_t)sizeof(float), "bias") < 0) {
        PyBuffer_Release(&scale);
        return NULL;
    }
    if (get_buffer(out_obj, &out, 1, n * channels * plane * (Py_ssize_t)sizeof(float), "out") < 0) {
        PyBuffer_Release(&scale);
        PyBuffer_Release(&bias);
        return NULL;
    }
    if (get_buffer(hdr_obj, &hdr, 1, n * header_size, "headers") < 0) {
        PyBuffer_Release(&scale);
        PyBuffer_Release(&bias);
        PyBuffer_Release(&out);
        return NULL;
    }
    Py_ssize_t bad = -1;
    PyObject **items = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(PyObject *));
    if (items == NULL) {
        PyBuffer_Release(&scale);
        PyBuffer_Release(&bias);
        PyBuffer_Release(&out);
        PyBuffer_Release(&hdr);
        return PyErr_NoMemory();
    }
    Py_ssize_t held = 0;
    int failed = 0;
    for (; held < n; held++) {
        PyObject *v = PyList_GET_ITEM(values, held);
        if (PyBytes_Check(v)) {
            Py_INCREF(v); /* the list may change while the GIL is released; the bytes stay alive */
        } else { /* a Kafka message: its value() (a new reference) */
            v = PyObject_CallMethodNoArgs(v, value_name);
            if (v == NULL) {
                failed = 1;
                break;
            }
        }
        if (!PyBytes_Check(v) || PyBytes_GET_SIZE(v) != length || memcmp(PyBytes_AS_STRING(v), ref, ref_len)) {
            Py_DECREF(v);
            bad = held;
            break;
        }
        items[held] = v;
    }
    if (!failed && bad < 0) { /* every item held: convert */
        const float *s = (const float *)scale.buf, *b = (const float *)bias.buf;
        float *o = (float *)out.buf;
        uint8_t *h = (uint8_t *)hdr.buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            const uint8_t *src = (const uint8_t *)PyBytes_AS_STRING(items[i]);
            memcpy(h + i * header_size, src, (size_t)header_size);
            const uint8_t *p = src + header_size;
            float *dst = o + i * channels * plane;
            for (Py_ssize_t c = 0; c < channels; c++) {
                const float sc = s[c], bc = b[c];
                const uint8_t *pc = p + c * plane;
                float *dc = dst + c * plane;
                for (Py_ssize_t j = 0; j < plane; j++)
                    dc[j] = (float)pc[j] * sc + bc;
            }
        }
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t i = 0; i < held; i++)
        Py_DECREF(items[i]);
    PyMem_Free(items);
    PyBuffer_Release(&scale);
    PyBuffer_Release(&bias);
    PyBuffer_Release(&out);
    PyBuffer_Release(&hdr);
    return failed ? NULL : PyLong_FromSsize_t(bad);
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HAVE_GATHER 1

/* the header's fields after the 24-byte layout prefix (wire.HEADER: label i32, device u32, seq u64,
 * produce_time f64 at offsets 24, 28, 32, 40) */
static inline void read_fields(const uint8_t *src, int32_t *label, uint32_t *device, uint64_t *seq, double *t) {
    memcpy(label, src + 24, 4);
    memcpy(device, src + 28, 4);
    memcpy(seq, src + 32, 8);
    memcpy(t, src + 40, 8);
}

/* d[j] = p[j] * sc + bc for j < plane: the scalar loop, or (stream) SSE2 with non-temporal stores --
 * the same float32 multiply, then add (never fused): bit-identical values. Non-temporal stores skip
 * reading each output line into the cache before writing it: for a batch bigger than the cache,
 * which would be evicted before the model reads it anyway, that halves the memory traffic. */
static inline void affine_row(const uint8_t *p, float *d, Py_ssize_t plane, float sc, float bc, int stream) {
    Py_ssize_t j = 0;
#if defined(__SSE2__)
    if (stream) {
        for (; j < plane && ((uintptr_t)(d + j) & 15); j++)
            d[j] = (float)p[j] * sc + bc;
        const __m128 vs = _mm_set1_ps(sc), vb = _mm_set1_ps(bc);
        const __m128i z = _mm_setzero_si128();
        for (; j + 16 <= plane; j += 16) {
            const __m128i q = _mm_loadu_si128((const __m128i *)(p + j));
            const __m128i lo = _mm_unpacklo_epi8(q, z), hi = _mm_unpackhi_epi8(q, z);
            _mm_stream_ps(d + j, _mm_add_ps(_mm_mul_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, z)), vs), vb));
            _mm_stream_ps(d + j + 4, _mm_add_ps(_mm_mul_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, z)), vs), vb));
            _mm_stream_ps(d + j + 8, _mm_add_ps(_mm_mul_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, z)), vs), vb));
            _mm_stream_ps(d + j + 12, _mm_add_ps(_mm_mul_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, z)), vs), vb));
        }
    }
#else
    (void)stream;
#endif
    for (; j < plane; j++)
        d[j] = (float)p[j] * sc + bc;
}

/* a raw sample's payload copied into the batch; stream: with non-temporal stores, which skip reading the
 * destination's lines into the cache first (a large batch -- a block bound for a GPU copy -- is not read back
 * by this core soon) */
static inline void copy_row(uint8_t *d, const uint8_t *p, Py_ssize_t n, int stream) {
#if defined(__SSE2__)
    if (stream && n >= 64) {
        Py_ssize_t head = (Py_ssize_t)((16 - ((uintptr_t)d & 15)) & 15);
        memcpy(d, p, (size_t)head);
        d += head;
        p += head;
        n -= head;
        for (; n >= 64; n -= 64, d += 64, p += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)p), b = _mm_loadu_si128((const __m128i *)(p + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(p + 32)), e = _mm_loadu_si128((const __m128i *)(p + 48));
            _mm_stream_si128((__m128i *)d, a);
            _mm_stream_si128((__m128i *)(d + 16), b);
            _mm_stream_si128((__m128i *)(d + 32), c);
            _mm_stream_si128((__m128i *)(d + 48), e);
        }
    }
#else
    (void)stream;
#endif
    memcpy(d, p, (size_t)n);
}

static PyObject *gather(PyObject *self, PyObject *args) {
    PyObject *values, *scale_obj, *bias_obj, *out_obj, *tgt_obj, *lab_obj, *dev_obj, *seq_obj, *t_obj;
    const char *ref;
    Py_ssize_t ref_len, length, tbytes, plane;
    long long lab_lo, lab_hi, dev_lo, dev_hi;
    int stream = 0;
    const Py_ssize_t header_size = HEADER_SIZE;
    if (!PyArg_ParseTuple(args, "O!y#nnnOOOOOOOOLLLL|p", &PyList_Type, &values, &ref, &ref_len, &length, &tbytes,
                          &plane, &scale_obj, &bias_obj, &out_obj, &tgt_obj, &lab_obj, &dev_obj, &seq_obj, &t_obj,
                          &lab_lo, &lab_hi, &dev_lo, &dev_hi, &stream))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(values);
    const int affine = scale_obj != Py_None;
    const Py_ssize_t payload = length - header_size - tbytes;
    if (ref_len < 1 || ref_len > header_size || tbytes < 0 || payload < 0 || (affine != (bias_obj != Py_None)) ||
        ((tbytes > 0) != (tgt_obj != Py_None)) || (affine && (plane < 1 || payload % plane))) {
        PyErr_SetString(PyExc_ValueError, "gather: inconsistent header_size, length, tbytes, targets, plane, scale "
                                          "and bias");
        return NULL;
    }
    const Py_ssize_t channels = affine ? payload / plane : 0;
    Py_buffer bufs[8]; /* scale, bias, out, labels, devices, seqs, times, targets */
    int used[8] = {0};
    PyObject *objs[8] = {scale_obj, bias_obj, out_obj, lab_obj, dev_obj, seq_obj, t_obj, tgt_obj};
    const Py_ssize_t want[8] = {channels * (Py_ssize_t)sizeof(float), channels * (Py_ssize_t)sizeof(float),
                                affine ? n * payload * (Py_ssize_t)sizeof(float) : n * payload,
                                n * 8, n * 8, n * 8, n * 8, n * tbytes};
    const char *names[8] = {"scale", "bias", "out", "labels", "devices", "seqs", "times", "targets"};
    PyObject *result = NULL;
    PyObject **items = NULL;
    Py_ssize_t held = 0;
    for (int k = 0; k < 8; k++) {
        if (objs[k] == Py_None)
            continue;
        if (get_buffer(objs[k], &bufs[k], k >= 2, want[k], names[k]) < 0)
            goto done;
        used[k] = 1;
    }
    Py_ssize_t piece = length > 0 ? GATHER_PIECE_BYTES / length : n;
    if (piece < 1)
        piece = 1;
    if (piece > n)
        piece = n;
    items = PyMem_Malloc((size_t)(piece ? piece : 1) * sizeof(PyObject *));
    if (items == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t bad = -1;
    const float *s = affine ? (const float *)bufs[0].buf : NULL, *b = affine ? (const float *)bufs[1].buf : NULL;
    int64_t *lab = (int64_t *)bufs[3].buf, *dev = (int64_t *)bufs[4].buf;
    uint64_t *seq = (uint64_t *)bufs[5].buf;
    double *tim = (double *)bufs[6].buf;
    for (Py_ssize_t start = 0; start < n && bad < 0; start += piece) {
        const Py_ssize_t end = start + piece < n ? start + piece : n;
        if (PyList_GET_SIZE(values) < end) {
            PyErr_SetString(PyExc_RuntimeError, "gather: the list of values changed");
            goto done;
        }
        for (Py_ssize_t i = start; i < end; i++) {
            PyObject *v = PyList_GET_ITEM(values, i);
            if (PyBytes_Check(v)) {
                Py_INCREF(v); /* the list may change while the GIL is released; the bytes stay alive */
            } else { /* a Kafka message: its value() (a new reference) */
                v = PyObject_CallMethodNoArgs(v, value_name);
                if (v == NULL)
                    goto done;
            }
            if (!PyBytes_Check(v) || PyBytes_GET_SIZE(v) != length || memcmp(PyBytes_AS_STRING(v), ref, ref_len)) {
                Py_DECREF(v);
                bad = i;
                break;
            }
            items[held++] = v;
        }
        if (bad < 0) { /* every item of the piece held: fields, checks, payload */
            Py_BEGIN_ALLOW_THREADS
            for (Py_ssize_t k = 0; k < held; k++) {
                const Py_ssize_t i = start + k;
                const uint8_t *src = (const uint8_t *)PyBytes_AS_STRING(items[k]);
                int32_t label;
                uint32_t device;
                read_fields(src, &label, &device, &seq[i], &tim[i]);
                lab[i] = label;
                dev[i] = device;
                if (label < lab_lo || label >= lab_hi || (long long)device < dev_lo || (long long)device >= dev_hi) {
                    bad = i;
                    break;
                }
                const uint8_t *p = src + header_size;
                if (tbytes)
                    memcpy((uint8_t *)bufs[7].buf + i * tbytes, p + payload, (size_t)tbytes);
                if (!affine) {
                    copy_row((uint8_t *)bufs[2].buf + i * payload, p, payload, stream);
                    continue;
                }
                float *dst = (float *)bufs[2].buf + i * payload;
                for (Py_ssize_t c = 0; c < channels; c++)
                    affine_row(p + c * plane, dst + c * plane, plane, s[c], b[c], stream);
            }
            Py_END_ALLOW_THREADS
        }
        for (Py_ssize_t k = 0; k < held; k++)
            Py_DECREF(items[k]);
        held = 0;
    }
#if defined(__SSE2__)
    if (stream)
        _mm_sfence(); /* the streamed stores are visible before the batch is handed out */
#endif
    result = PyLong_FromSsize_t(bad);
done:
    for (Py_ssize_t i = 0; i < held; i++)
        Py_DECREF(items[i]);
    PyMem_Free(items);
    for (int k = 0; k < 8; k++)
        if (used[k])
            PyBuffer_Release(&bufs[k]);
    return result;
}
#endif

static PyMethodDef methods[] = {
    {"u8_affine", u8_affine, METH_VARARGS,
     "u8_affine(values, ref, length, plane, scale, bias, out, headers) -> -1 or the first bad index"},
#ifdef HAVE_GATHER
    {"gather", gather, METH_VARARGS,
     "gather(values, ref, length, tbytes, plane, scale, bias, out, targets, labels, devices, seqs, times, lab_lo, "
     "lab_hi, dev_lo, dev_hi, stream=False) -> -1 or the first bad index"},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wirefast",
                                    "wire samples to a batch (raw, or uint8 normalised to float32) in one pass", -1, methods};

PyMODINIT_FUNC PyInit__wirefast(void) {
    value_name = PyUnicode_InternFromString("value");
    if (value_name == NULL)
        return NULL;
    return PyModule_Create(&module);
}
