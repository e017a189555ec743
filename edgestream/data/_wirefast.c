/* The consumer's hot loop in C: a batch of wire-format uint8 samples straight into normalised float32.
 *
 * u8_affine(values, ref, length, plane, scale, bias, out, headers) -> int
 *
 *   values   list of bytes (or of Kafka messages: their value()), each `length` bytes: a
 *            48-byte header, then the uint8 payload
 *   ref      bytes: the header prefix (magic, version, dtype, ndim, pad, dims: 24 bytes) every value
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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 48

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

static PyMethodDef methods[] = {
    {"u8_affine", u8_affine, METH_VARARGS,
     "u8_affine(values, ref, length, plane, scale, bias, out, headers) -> -1 or the first bad index"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wirefast",
                                    "uint8 wire samples to normalised float32 in one pass", -1, methods};

PyMODINIT_FUNC PyInit__wirefast(void) {
    value_name = PyUnicode_InternFromString("value");
    if (value_name == NULL)
        return NULL;
    return PyModule_Create(&module);
}
