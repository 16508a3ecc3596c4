"""The page scripts of Tokens & masking, Predictions, Export and How BERT computes are functions (issue 72): at
module level only imports, constants, the functions and one call of main(), so the function-size check
(tests/test_layers.py) reads all of their code."""

import ast
from pathlib import Path

import pytest

PAGES = Path(__file__).resolve().parent.parent / "pages"


@pytest.mark.parametrize("page", ["1_Tokens_and_masking.py", "4_Predictions.py", "6_Export.py",
                                  "7_How_BERT_computes.py"])
def test_the_page_script_is_functions(page):
    tree = ast.parse((PAGES / page).read_text())
    loose = [ast.unparse(node).splitlines()[0] for node in tree.body
             if not isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign))
             and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]   # the docstring
    assert loose == ["main()"], loose
    drawn = [ast.unparse(node) for node in tree.body if isinstance(node, ast.Assign)
             and any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                     and isinstance(n.func.value, ast.Name) and n.func.value.id == "st" for n in ast.walk(node.value))]
    assert not drawn, drawn   # a constant names a thing (a range, a key list), it never draws
