"""Compatibility: the exercise-cell convention lives in course_kit.grading.instructor.cells."""
from course_kit.grading.instructor.cells import (  # noqa: F401
    BEGIN, END, ID, ROLES, Exercise, check_ids, exercises, meta, role, source_text, strip_solution)
