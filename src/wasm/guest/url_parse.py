# urlparse() as fast as CPython 3.11-3.14 made it. Those keep a cache of split URLs that
# urlparse() goes through; 3.15's urlparse() splits each time. requests splits every URL it
# sends about six times (cookies, proxies, credentials), so each split costs it again.
# The split is a pure function of its arguments and its result is made of strings, so a
# cache of it answers exactly what splitting again would; an error is raised each time
# (the cache keeps only results). Only plain strings are kept (a str subclass may compare
# equal to another string, or not hash at all), and not long ones (a data: URL): the
# cache would keep them alive.

__sandbox_internal__ = True

import functools

# Longest URL whose split is kept.
LONGEST_KEPT = 2048
# The scheme's types whose splits are kept.
PLAIN = (str, type(None))


def patch_urllib_parse(parse):
    """Keeps urllib.parse's split of the URLs it is asked for, as urlsplit() does already,
    for urlparse() too. A runtime whose urllib.parse has no uncached split is left alone."""
    split = getattr(parse, "_urlsplit", None)
    if split is None or hasattr(split, "cache_info") or not hasattr(parse, "_urlparse"):
        return
    kept = functools.lru_cache(maxsize=256, typed=True)(split)

    @functools.wraps(split)
    def _urlsplit(url, scheme=None, allow_fragments=True):
        if (type(url) is str and len(url) <= LONGEST_KEPT and type(scheme) in PLAIN
                and type(allow_fragments) is bool):
            return kept(url, scheme, allow_fragments)
        return split(url, scheme, allow_fragments)

    _urlsplit.cache_info, _urlsplit.cache_clear = kept.cache_info, kept.cache_clear
    parse._urlsplit = _urlsplit
