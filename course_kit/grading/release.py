"""Compatibility: the release tool lives in course_kit.grading.instructor.release."""
from course_kit.grading.instructor.release import MANIFEST, course_notebooks, release, release_notebook  # noqa: F401
