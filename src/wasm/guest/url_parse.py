# urlparse() as fast as CPython 3.11-3.14 made it. Those keep a cache of split URLs that
# urlparse() goes through; 3.15's urlparse() splits each time. requests splits every URL it
# sends about six times (cookies, proxies, credentials), so each split costs it again.
# The split is a pure function of its arguments and its result is made of strings, so a
# cache of it answers exactly what splitting again would; an error is raised each time
# (the cache keeps only results). Long URLs (a data: URL) are split each time: the cache
# would keep them alive.

__sandbox_internal__ = True

import functools

# Longest URL whose split is kept.
LONGEST_KEPT = 2048


def patch_urllib_parse(parse):
    """Keeps urllib.parse's split of the URLs it is asked for, as urlsplit() does already,
    for urlparse() too. A runtime whose urllib.parse has no uncached split is left alone."""
    split = getattr(parse, "_urlsplit", None)
    if split is None or hasattr(split, "cache_info") or not hasattr(parse, "_urlparse"):
        return
    kept = functools.lru_cache(maxsize=256)(split)

    @functools.wraps(split)
    def _urlsplit(url, *args, **kwargs):
        if len(url) > LONGEST_KEPT:
            return split(url, *args, **kwargs)
        return kept(url, *args, **kwargs)

    _urlsplit.cache_info, _urlsplit.cache_clear = kept.cache_info, kept.cache_clear
    parse._urlsplit = _urlsplit
