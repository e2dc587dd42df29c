"""Builds the optional compiled cores of the conservative and site pools (everything else is in
pyproject.toml).  Where no C compiler exists the build is skipped and the pure-Python
reference runs instead (``grid_tasks.maui.pool_compiled.CORE`` says which)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("grid_tasks.maui._conservative", ["grid_tasks/maui/_conservative.c"],
                             optional=True),
                   Extension("grid_tasks.maui._site", ["grid_tasks/maui/_site.c", "grid_tasks/maui/_site_core.c"],
                             depends=["grid_tasks/maui/_site.h"], optional=True,
                             extra_compile_args=["-ffp-contract=off"])])
