/* The site pool's compiled core, its Python binding (_site_core.c decides; see there
 * why it exists and how it stays identical to the reference, grid_tasks/maui/lean.py).
 * Jobs and credentials live in slots: ints handed to Python (pool_site.py). */
#include "_site.h"

/* -- Python binding ------------------------------------------------------------------ */
static void Core_dealloc(Core *c) {
    for (idx i = 0; i < c->njobs; i++) PyMem_Free(c->jobs[i].fixed);
    for (idx i = 0; i < c->ncreds; i++) { PyMem_Free(c->creds[i].tag); PyMem_Free(c->creds[i].val); }
    PyMem_Free(c->t); PyMem_Free(c->v); PyMem_Free(c->tf); PyMem_Free(c->jobs); PyMem_Free(c->creds);
    PyMem_Free(c->ready); PyMem_Free(c->free_slots); PyMem_Free(c->running);
    PyMem_Free(c->reserved); PyMem_Free(c->order);
    PyMem_Free(c->picks); PyMem_Free(c->holds); PyMem_Free(c->comps); PyMem_Free(c->ttag);
    PyMem_Free(c->tval); PyMem_Free(c->r_st); PyMem_Free(c->r_cr); PyMem_Free(c->r_rel);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static int Core_init(Core *c, PyObject *args, PyObject *kw) {
    PyObject *comps;
    if (!PyArg_ParseTuple(args, "dddiiididiO", &c->size, &c->cap_now, &c->depth, &c->at_once,
                          &c->fifo, &c->fs_on, &c->fs_interval, &c->fs_depth, &c->fs_decay,
                          &c->throttles, &comps))
        return -1;
    if (c->t) { PyErr_SetString(PyExc_RuntimeError, "the core is initialised once"); return -1; }
    if (c->fs_depth < 0) c->fs_depth = 0;
    c->n = 1; c->cap = 16;
    c->t = PyMem_Malloc(16 * sizeof(double)); c->v = PyMem_Malloc(16 * sizeof(double));
    c->tf = PyMem_Malloc(16);
    if (!c->t || !c->v || !c->tf) { PyErr_NoMemory(); return -1; }
    c->t[0] = -INFINITY; c->v[0] = c->size; c->tf[0] = 1;
    if (site_new_ring(c, &c->ttag, &c->tval) < 0) return -1;
    PyObject *seq = PySequence_Fast(comps, "components must be a sequence");
    if (!seq) return -1;
    c->ncomp = (int)PySequence_Fast_GET_SIZE(seq);
    c->comps = PyMem_Calloc((size_t)c->ncomp + 1, sizeof(Comp));
    if (!c->comps) { Py_DECREF(seq); PyErr_NoMemory(); return -1; }
    for (int k = 0; k < c->ncomp; k++) {
        PyObject *subs; Comp *cp = &c->comps[k];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, k), "diO", &cp->cw, &cp->fixed, &subs)) {
            Py_DECREF(seq); return -1;
        }
        PyObject *ss = PySequence_Fast(subs, "subcomponents must be a sequence");
        if (!ss) { Py_DECREF(seq); return -1; }
        cp->nsub = (int)PySequence_Fast_GET_SIZE(ss);
        if (cp->nsub > MAXSUBS) {
            Py_DECREF(ss); Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "too many subcomponents");
            return -1;
        }
        for (int s = 0; s < cp->nsub; s++)
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(ss, s), "id", &cp->code[s], &cp->sw[s])) {
                Py_DECREF(ss); Py_DECREF(seq); return -1;
            }
        Py_DECREF(ss);
    }
    Py_DECREF(seq);
    return 0;
}

static int opt_double(PyObject *o, int *has, double *out) {
    if (o == Py_None) { *has = 0; *out = 0; return 0; }
    *has = 1; *out = PyFloat_AsDouble(o);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *Core_credential(Core *c, PyObject *args) {
    Cred cr; PyObject *target, *limits, *maxi;
    memset(&cr, 0, sizeof cr);
    if (!PyArg_ParseTuple(args, "iOiOO", &cr.kind, &target, &cr.tmode, &limits, &maxi)) return NULL;
    if (opt_double(target, &cr.has_target, &cr.tval) < 0 || opt_double(maxi, &cr.has_maxi, &cr.maxi) < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(limits, "limits must be a sequence");
    if (!seq) return NULL;
    if (PySequence_Fast_GET_SIZE(seq) != 4) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "4 limits");
        return NULL;
    }
    for (int k = 0; k < 4; k++) {
        PyObject *lim = PySequence_Fast_GET_ITEM(seq, k);
        if (lim == Py_None) continue;
        if (!PyArg_ParseTuple(lim, "dd", &cr.lim[k][0], &cr.lim[k][1])) { Py_DECREF(seq); return NULL; }
        cr.has_lim[k] = 1; cr.any_lim = 1;
    }
    Py_DECREF(seq);
    cr.pct_gen = (unsigned long)-1;
    if (site_new_ring(c, &cr.tag, &cr.val) < 0) return NULL;
    if (PUSH(c->creds, c->ncreds, c->capcreds, cr) < 0) return NULL;
    return PyLong_FromSsize_t(c->ncreds - 1);
}

static PyObject *Core_submit(Core *c, PyObject *args) {
    JobS j; PyObject *bykind, *fixed; int ready;
    memset(&j, 0, sizeof j);
    if (!PyArg_ParseTuple(args, "Lddidlldddd" "OOii", &j.seq, &j.submit, &j.wall, &j.wallf, &j.procs,
                          &j.tasks, &j.ppt, &j.priority, &j.metric, &j.rate, &j.accounted, &bykind,
                          &fixed, &ready, &j.ever_fit))
        return NULL;
    PyObject *bk = PySequence_Fast(bykind, "credentials must be a sequence");
    if (!bk) return NULL;
    if (PySequence_Fast_GET_SIZE(bk) != KINDS) {
        Py_DECREF(bk); PyErr_SetString(PyExc_ValueError, "one credential (or -1) per kind"); return NULL;
    }
    for (int k = 0; k < KINDS; k++) {
        long cred = PyLong_AsLong(PySequence_Fast_GET_ITEM(bk, k));
        if (cred < -1 || cred >= c->ncreds) {
            Py_DECREF(bk);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "no such credential");
            return NULL;
        }
        j.bykind[k] = (int)cred;
        if (cred >= 0) j.creds[j.ncred++] = (int)cred;
    }
    Py_DECREF(bk);
    j.fixed = PyMem_Calloc((size_t)c->ncomp + 1, sizeof(double));
    PyObject *fx = PySequence_Fast(fixed, "fixed parts must be a sequence");
    if (!fx || !j.fixed) { Py_XDECREF(fx); PyMem_Free(j.fixed); return PyErr_NoMemory(); }
    for (int k = 0; k < c->ncomp && k < PySequence_Fast_GET_SIZE(fx); k++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fx, k);
        j.fixed[k] = o == Py_None ? NAN : PyFloat_AsDouble(o);
    }
    Py_DECREF(fx);
    if (PyErr_Occurred()) { PyMem_Free(j.fixed); return NULL; }
    int slot = site_slot(c, &j, ready);
    return slot < 0 ? NULL : PyLong_FromLong(slot);
}

static JobS *job_in(Core *c, int s, int running) {
    if (s < 0 || s >= c->njobs || c->jobs[s].state == GONE) {
        PyErr_SetString(PyExc_KeyError, "no job in that slot");
        return NULL;
    }
    if ((c->jobs[s].state == RUNNING) != running) {
        PyErr_SetString(PyExc_ValueError, running ? "the job is not running" : "the job is not idle");
        return NULL;
    }
    return &c->jobs[s];
}

static PyObject *Core_cancel(Core *c, PyObject *args) {
    int s;
    if (!PyArg_ParseTuple(args, "i", &s) || !job_in(c, s, 0)) return NULL;
    int had = site_cancel(c, s);
    return had < 0 ? NULL : PyBool_FromLong(had);
}

static PyObject *Core_ended(Core *c, PyObject *args) {
    int s, nowf; double now;
    if (!PyArg_ParseTuple(args, "idi", &s, &now, &nowf) || !job_in(c, s, 1)) return NULL;
    if (site_ended(c, s, now, nowf) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Core_restore(Core *c, PyObject *args) {
    int s, startf; double start;
    if (!PyArg_ParseTuple(args, "idi", &s, &start, &startf) || !job_in(c, s, 0)) return NULL;
    if (site_restore(c, s, start, startf) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Core_iterate(Core *c, PyObject *args) {
    double now; int nowf;
    if (!PyArg_ParseTuple(args, "di", &now, &nowf)) return NULL;
    if (site_iterate(c, now, nowf) < 0) return NULL;
    PyObject *st = PyList_New(c->nst), *cr = PyList_New(c->ncr), *rel = PyList_New(c->nrel);
    if (!st || !cr || !rel) { Py_XDECREF(st); Py_XDECREF(cr); Py_XDECREF(rel); return NULL; }
    for (idx k = 0; k < c->nst; k++)
        PyList_SET_ITEM(st, k, Py_BuildValue("ii", c->r_st[k].slot, c->r_st[k].backfill));
    for (idx k = 0; k < c->ncr; k++)
        PyList_SET_ITEM(cr, k, Py_BuildValue("idi", c->r_cr[k].slot, c->r_cr[k].t, c->r_cr[k].tf));
    for (idx k = 0; k < c->nrel; k++) PyList_SET_ITEM(rel, k, PyLong_FromLong(c->r_rel[k]));
    return Py_BuildValue("NNNll", st, cr, rel, c->considered, c->throttled);
}

static PyObject *Core_next_reservation(Core *c, PyObject *args) {
    double now; int flag;
    if (!PyArg_ParseTuple(args, "d", &now)) return NULL;
    double best = site_next_reservation(c, now, &flag);
    return Py_BuildValue("di", best, flag);
}

static PyObject *Core_add(Core *c, PyObject *args) {
    double a, b, d; int af, bf;
    if (!PyArg_ParseTuple(args, "didid", &a, &af, &b, &bf, &d)) return NULL;
    if (site_prof_add(c, a, af, b, bf, d) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Core_set_holds(Core *c, PyObject *args) {
    PyObject *list;
    if (!PyArg_ParseTuple(args, "O", &list)) return NULL;
    PyObject *seq = PySequence_Fast(list, "holds must be a sequence");
    if (!seq) return NULL;
    c->nholds = 0;
    for (idx k = 0; k < PySequence_Fast_GET_SIZE(seq); k++) {
        HoldS h;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, k), "ddd", &h.start, &h.end, &h.amount)
                || PUSH(c->holds, c->nholds, c->capholds, h) < 0) { Py_DECREF(seq); return NULL; }
    }
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

static PyObject *Core_min_over(Core *c, PyObject *args) {
    double a, b;
    if (!PyArg_ParseTuple(args, "dd", &a, &b)) return NULL;
    return PyFloat_FromDouble(site_prof_min_over(c, a, b));
}

static PyObject *ring_list(Core *c, const long long *tag, const double *val) {
    PyObject *out = PyList_New(0);
    for (idx k = 0; out && k <= c->fs_depth; k++) {
        if (tag[k] == LLONG_MIN) continue;
        PyObject *item = Py_BuildValue("Ld", tag[k], val[k]);
        if (!item || PyList_Append(out, item) < 0) { Py_XDECREF(item); Py_DECREF(out); return NULL; }
        Py_DECREF(item);
    }
    return out;
}

static PyObject *Core_export(Core *c, PyObject *noargs) {
    PyObject *run = PyList_New(c->nrunning), *res = PyList_New(c->nreserved), *use = PyList_New(c->ncreds);
    if (!run || !res || !use) goto fail;
    for (idx k = 0; k < c->nrunning; k++) {
        JobS *j = &c->jobs[c->running[k]];
        PyList_SET_ITEM(run, k, Py_BuildValue("idd", c->running[k], j->start, j->accounted));
    }
    for (idx k = 0; k < c->nreserved; k++)
        PyList_SET_ITEM(res, k, Py_BuildValue("id", c->reserved[k], c->jobs[c->reserved[k]].rstart));
    for (idx k = 0; k < c->ncreds; k++) {
        PyObject *r = ring_list(c, c->creds[k].tag, c->creds[k].val);
        if (!r) goto fail;
        PyList_SET_ITEM(use, k, r);
    }
    PyObject *tot = ring_list(c, c->ttag, c->tval);
    if (!tot) goto fail;
    return Py_BuildValue("NNNN", run, res, use, tot);
fail:
    Py_XDECREF(run); Py_XDECREF(res); Py_XDECREF(use);
    return NULL;
}

static PyObject *Core_profile(Core *c, PyObject *noargs) {
    PyObject *t = PyList_New(c->n), *v = PyList_New(c->n);
    if (!t || !v) { Py_XDECREF(t); Py_XDECREF(v); return NULL; }
    for (idx k = 0; k < c->n; k++) {
        PyList_SET_ITEM(t, k, c->tf[k] ? PyFloat_FromDouble(c->t[k]) : PyLong_FromDouble(c->t[k]));
        PyList_SET_ITEM(v, k, PyFloat_FromDouble(c->v[k]));
    }
    return Py_BuildValue("NN", t, v);
}

static PyMethodDef Core_methods[] = {
    {"credential", (PyCFunction)Core_credential, METH_VARARGS,
     "credential(kind, fs target or None, target mode, 4 (soft, hard) limits or None, "
     "MAXIJOB or None) -> index"},
    {"submit", (PyCFunction)Core_submit, METH_VARARGS,
     "submit(seq, submit, walltime, walltime is float, procs, tasks, ppt, priority, metric, rate, "
     "accounted, credential per kind, fixed parts, ready, ever_fit) -> slot"},
    {"cancel", (PyCFunction)Core_cancel, METH_VARARGS, "cancel(slot) -> whether it held a reservation"},
    {"ended", (PyCFunction)Core_ended, METH_VARARGS, "ended(slot, now, now is float)"},
    {"restore", (PyCFunction)Core_restore, METH_VARARGS,
     "restore(slot, start, start is float): running since start"},
    {"add", (PyCFunction)Core_add, METH_VARARGS,
     "add(start, start is float, end, end is float, delta): free amount over [start, end)"},
    {"set_holds", (PyCFunction)Core_set_holds, METH_VARARGS, "set_holds([(start, end, amount)])"},
    {"iterate", (PyCFunction)Core_iterate, METH_VARARGS,
     "iterate(now, now is float) -> ([(slot, backfill)], [(slot, start, start is float)], [slot], "
     "considered, throttled)"},
    {"next_reservation", (PyCFunction)Core_next_reservation, METH_VARARGS,
     "next_reservation(now) -> (earliest reservation start after now, it is a float)"},
    {"min_over", (PyCFunction)Core_min_over, METH_VARARGS, "min_over(start, end): least free"},
    {"export", (PyCFunction)Core_export, METH_NOARGS, "(running, reserved, usage per credential, totals)"},
    {"profile", (PyCFunction)Core_profile, METH_NOARGS,
     "(times, values) of the free-processor profile, each time an int or float as it came"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "grid_tasks.maui._site.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The site pool's state and iteration (pool_site.py is its Python side).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Core_init,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_methods = Core_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_site",
    .m_doc = "Compiled core of the site pool (lean.py on the general engine is the reference).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__site(void) {
    if (PyType_Ready(&CoreType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0) {
        Py_DECREF(&CoreType); Py_DECREF(m);
        return NULL;
    }
    return m;
}
