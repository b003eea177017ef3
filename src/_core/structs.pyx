# cython: language_level=3
"""Struct: a decoded Kafka message (or nested struct) as a dict of snake_case field names
with attribute access (``request.topics[0].partitions``).

Compiled because attribute access is on every request's path: a dict subclass with a
Python ``__getattr__`` pays for an AttributeError (a formatted message) on each access
before reaching the item, more than the rest of decoding a Fetch. Here a name the type
defines (dict's methods) resolves as for any object, any other name is the item, and
only a missing one raises.
"""
from cpython.dict cimport PyDict_GetItemWithError
from cpython.object cimport PyObject, PyObject_GenericGetAttr, PyTypeObject, Py_TYPE

cdef extern from "Python.h":
    PyObject* _PyType_Lookup(PyTypeObject* type, object name)


cdef class Struct(dict):
    """A dict of field names with attribute access. Decoded structs hold every field the
    declaration knows, with defaults for fields absent in the decoded version. Plain
    dicts are accepted wherever a Struct is expected for encoding."""

    def __getattribute__(self, name):
        cdef PyObject* found
        if _PyType_Lookup(Py_TYPE(self), name) != NULL:
            return PyObject_GenericGetAttr(self, name)
        found = PyDict_GetItemWithError(self, name)
        if found == NULL:
            raise AttributeError(name)
        return <object>found

    def __setattr__(self, name, value):
        self[name] = value

    def __delattr__(self, name):
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self):
        return f"Struct({dict.__repr__(self)})"

    def __reduce__(self):
        return (Struct, (dict(self),))
