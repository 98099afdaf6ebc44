"""The course model: a compact Llama that loads HF weights (`llama`), and token sampling (`sampling`)."""
from . import llama, sampling  # noqa: F401
