"""``pkc.aot_compile``: a layer compiled once and loaded by later processes without
compiling (AOTInductor packages of pkc's programs; issue 18's second-process compile).

:mod:`pkc.aot.cache` is the fast path (the key, loading, :class:`AotLayer`): it imports
only torch and the standard library. :mod:`pkc.aot.build` is the first process's compile
and the package build (``python -m pkc.aot.build`` runs a background build);
:mod:`pkc.aot.link` keeps the wrapper library's link and relinks it where torch's link
would crash the loader (the H200 machine's /opt/gcc toolchain).
"""

from pkc.aot.cache import AotError, AotLayer, Build, aot_compile, cache_root, layer_key

__all__ = ["aot_compile", "AotLayer", "AotError", "Build", "layer_key", "cache_root"]
