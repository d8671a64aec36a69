"""Tool-calling verifier: response layout and parsing, BFCL AST matching, BFCL data loading.

Plain modules with no OpenRLHF import; ``mrtpo_openrlhf.tasks.tool.reward`` turns them into rewards.
"""

from mrtpo_openrlhf.tasks.tool.verifier.ast_match import (
    check_bfcl,
    check_function_choice,
    irrelevance,
    multiple,
    normalize_string,
    parallel,
    parallel_multiple,
    reference_calls,
    relevance,
    simple,
)
from mrtpo_openrlhf.tasks.tool.verifier.layout import (
    TOOL_FORMAT_BLOCK,
    ParsedCalls,
    ToolCall,
    check_format,
    parse_tool_calls,
    render_calls,
)

__all__ = [
    "TOOL_FORMAT_BLOCK",
    "ParsedCalls",
    "ToolCall",
    "check_format",
    "parse_tool_calls",
    "render_calls",
    "check_bfcl",
    "check_function_choice",
    "irrelevance",
    "multiple",
    "normalize_string",
    "parallel",
    "parallel_multiple",
    "reference_calls",
    "relevance",
    "simple",
]
from mrtpo_openrlhf.tasks.tool.verifier.bfcl_data import (  # noqa: E402
    AST_CATEGORIES,
    BFCL_VERSION_PREFIX,
    BfclItem,
    load_bfcl,
)

__all__ += ["AST_CATEGORIES", "BFCL_VERSION_PREFIX", "BfclItem", "load_bfcl"]
