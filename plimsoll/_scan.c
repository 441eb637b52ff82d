/* One pass over a text's UTF-8 bytes for plimsoll/estimate.py: the sum of the bytes' costs, and the pairs of word
shapes (what a byte table cannot tell: a capital that starts a word from one inside an identifier).

A byte's shape is 0 for anything but the three below, 1 for a space, 2 for a lower-case ASCII letter and 3 for a
capital. scan(data, table) returns (the sum of table[byte] over data, 16 counts), where count 4 * first + second
is how many times a byte of shape `first` is followed by one of shape `second`. Four lanes take every fourth byte
each, so that a run of the same pair (a word's letters) does not make each increment wait for the one before. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

static unsigned char SHAPE[256];

static PyObject *
scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[1]) || PyBytes_GET_SIZE(args[1]) != 256) {
        PyErr_SetString(PyExc_TypeError, "scan() needs two bytes: the text's UTF-8 form and a 256-byte table");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    const unsigned char *table = (const unsigned char *)PyBytes_AS_STRING(args[1]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t lanes[4][16] = {{0}};
    unsigned long long sums[4] = {n > 0 ? table[p[0]] : 0, 0, 0, 0};
    Py_ssize_t i = 1;
    for (; i + 4 <= n; i += 4) {
        unsigned char b = p[i], c = p[i + 1], d = p[i + 2], e = p[i + 3];
        unsigned sa = SHAPE[p[i - 1]], sb = SHAPE[b], sc = SHAPE[c], sd = SHAPE[d], se = SHAPE[e];
        sums[0] += table[b];
        sums[1] += table[c];
        sums[2] += table[d];
        sums[3] += table[e];
        lanes[0][4 * sa + sb]++;
        lanes[1][4 * sb + sc]++;
        lanes[2][4 * sc + sd]++;
        lanes[3][4 * sd + se]++;
    }
    for (; i < n; i++) {
        sums[0] += table[p[i]];
        lanes[0][4 * SHAPE[p[i - 1]] + SHAPE[p[i]]]++;
    }
    PyObject *pairs = PyTuple_New(16);
    if (pairs == NULL) {
        return NULL;
    }
    for (int pair = 0; pair < 16; pair++) {
        PyObject *count = PyLong_FromSsize_t(lanes[0][pair] + lanes[1][pair] + lanes[2][pair] + lanes[3][pair]);
        if (count == NULL) {
            Py_DECREF(pairs);
            return NULL;
        }
        PyTuple_SET_ITEM(pairs, pair, count);
    }
    return Py_BuildValue("(KN)", sums[0] + sums[1] + sums[2] + sums[3], pairs);
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL,
     "scan(data, table): the sum of table[byte] over data, and the 16 counts of adjacent pairs of word shapes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, 0, methods};

PyMODINIT_FUNC
PyInit__scan(void)
{
    SHAPE[' '] = 1;
    for (int byte = 'a'; byte <= 'z'; byte++) {
        SHAPE[byte] = 2;
    }
    for (int byte = 'A'; byte <= 'Z'; byte++) {
        SHAPE[byte] = 3;
    }
    return PyModule_Create(&module);
}
