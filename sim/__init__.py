"""SimPy discrete-event simulator of PPD layer schedules on modelled GPUs (and FREE's:
``simulate_free``)."""

from sim.config import SimConfig
from sim.cost import MeasuredCost, RooflineCost, UniformCost
from sim.free_schedule import monte_carlo_free, simulate_free
from sim.hardware import GPUSpec, Link
from sim.matches import Bernoulli, PerPosition, Replay
from sim.run import MonteCarloSummary, SimResult, monte_carlo, simulate
from sim.shape import ModelShape


def plot_gantt(result, ax=None, **kwargs):
    """Gantt chart of a schedule (see ``sim.gantt.plot_gantt``; imports matplotlib lazily)."""
    from sim.gantt import plot_gantt as _plot_gantt

    return _plot_gantt(result, ax=ax, **kwargs)


__all__ = [
    "Bernoulli",
    "GPUSpec",
    "Link",
    "MeasuredCost",
    "ModelShape",
    "MonteCarloSummary",
    "PerPosition",
    "Replay",
    "RooflineCost",
    "SimConfig",
    "SimResult",
    "UniformCost",
    "monte_carlo",
    "monte_carlo_free",
    "plot_gantt",
    "simulate",
    "simulate_free",
]
