"""course_kit: the real implementations behind the accelerated-AI course notebooks."""

__version__ = "0.1.0"
