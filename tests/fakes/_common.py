CALLS = []  # (library, function, kwargs summary) of every fake call, for tests to inspect


def record(lib, fn, **info):
    CALLS.append((lib, fn, info))
