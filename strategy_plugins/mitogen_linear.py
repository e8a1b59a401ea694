"""Mitogen's linear strategy, under the project's own plugin folder.

The Molecule scenarios' converge plays name `strategy: mitogen_linear`, as provision's own runs
do; each scenario finds it here (molecule.yml sets ANSIBLE_STRATEGY_PLUGINS to this folder)
without knowing where the virtual environment keeps the mitogen package."""

from ansible_mitogen.plugins.strategy.mitogen_linear import StrategyModule

__all__ = ["StrategyModule"]
