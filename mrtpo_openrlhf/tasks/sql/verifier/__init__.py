"""Text-to-SQL verification: sandboxed execution, official result comparisons, response layout, gold cache.

Plain modules with no OpenRLHF import; the reward function lives in ``mrtpo_openrlhf.tasks.sql.reward``.
"""

from .cache import GoldResultCache
from .compare import COMPARISONS, ComparisonTimeout, bird_set_match, compare_results, spider_result_eq
from .extract import SQL_FORMAT_BLOCK, FormatCheck, check_format, extract_sql, response_from_query
from .lexer import has_top_level_order_by, remove_distinct, split_statements
from .pool import run_query
from .sandbox import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    SqlResult,
    check_statement,
    execute_sql,
    read_schema_ddl,
)

__all__ = [
    "COMPARISONS",
    "ComparisonTimeout",
    "DEFAULT_MAX_ROWS",
    "DEFAULT_TIMEOUT_S",
    "FormatCheck",
    "GoldResultCache",
    "SQL_FORMAT_BLOCK",
    "SqlResult",
    "bird_set_match",
    "check_format",
    "check_statement",
    "compare_results",
    "execute_sql",
    "extract_sql",
    "has_top_level_order_by",
    "read_schema_ddl",
    "remove_distinct",
    "response_from_query",
    "run_query",
    "spider_result_eq",
    "split_statements",
]
