"""Builds the optional compiled core of the conservative pool (everything else is in
pyproject.toml).  Where no C compiler exists the build is skipped and the pure-Python
reference runs instead (``grid_tasks.maui.pool_compiled.CORE`` says which)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("grid_tasks.maui._conservative", ["grid_tasks/maui/_conservative.c"],
                             optional=True)])
