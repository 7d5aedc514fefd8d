"""Checks of suite-file values.

Each check returns the value when it is what the suite file may hold there,
and raises SuiteError naming the key's path (e.g. `stragglers.slow.slow_worker`),
what it got and what was expected.
"""

import math
import re

# A name of a workload or straggler setting: it names files.
NAME = re.compile(r"^[A-Za-z0-9_]+$")


class SuiteError(Exception):
    """A bad suite file: the message names the key's path and what was expected."""


def describe(v):
    """A value as a message shows it: nothing, a map, a list or its repr."""
    if v is None:
        return "nothing"
    if isinstance(v, dict):
        return "a map"
    if isinstance(v, list):
        return "%r" % (v,) if all(not isinstance(x, (dict, list)) for x in v) else "a list"
    return "%r" % (v,)


def strict_loader():
    """A SafeLoader that refuses a key given twice in one map."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def construct_mapping(loader, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "a map key must be a plain value", key_node.start_mark)
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, "key %r given twice" % (key,), key_node.start_mark)
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return Loader


def check_map(value, where, allowed, required=()):
    if not isinstance(value, dict):
        raise SuiteError("%s: got %s; expected a map with keys %s" %
                         (where, describe(value), ", ".join(allowed)))
    for k in value:
        if k not in allowed:
            raise SuiteError("%s: unknown key %r; expected one of %s" %
                             (where, k, ", ".join(allowed)))
    for k in required:
        if k not in value:
            raise SuiteError("%s: the key %r is required" % (where, k))
    return value


def check_int(value, where, minimum, maximum=None, why=""):
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum and \
        (maximum is None or value <= maximum)
    if not ok:
        bound = ">= %d" % minimum if maximum is None else "in %d..%d" % (minimum, maximum)
        raise SuiteError("%s: got %s; expected an integer %s%s" % (where, describe(value), bound,
                                                                  why))
    return value


def check_number(value, where, low, high, low_open=False, high_open=False):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and \
            (high is None or (value < high if high_open else value <= high))
    if not ok:
        rng = "%s%g, %s" % ("(" if low_open else "[", low, "inf)" if high is None else
                            "%g%s" % (high, ")" if high_open else "]"))
        raise SuiteError("%s: got %s; expected a number in %s" % (where, describe(value), rng))
    return value


def named_entries(value, key, expected):
    """(name, spec, path) of each entry of the map `value` under `key`, whose
    names name files; SuiteError when it is not a non-empty map or a name
    is not letters, digits and _."""
    if not isinstance(value, dict) or not value:
        raise SuiteError("%s: got %s; expected %s" % (key, describe(value), expected))
    for name, spec in value.items():
        if not isinstance(name, str) or not NAME.match(name):
            raise SuiteError("%s: the name %r is not letters, digits and _ (it names "
                             "files)" % (key, name))
        yield name, spec, "%s.%s" % (key, name)
