"""The ``journaled`` command: ``dump``, ``stat``, ``check``, ``repair``, ``serve`` and ``qtest``.

Offers: ``main`` (the entry point and its exit statuses), ``inspection`` (dump, stat, check,
repair), ``serve`` (a dedicated owner), ``qtest`` (the self-checking load tests, a subpackage).

May import anything of journaled; nothing of journaled imports it.
"""
