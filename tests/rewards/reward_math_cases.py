"""Table of (prediction, gold, expected status) pairs covering the answer forms the math checker handles."""

EQUIVALENT = [
    # integers and leading zeros
    ("5", "5"),
    ("05", "5"),
    ("12", "012"),
    ("5.0", "5"),
    ("7.", "7"),
    ("−7", "-7"),
    # fractions and decimals
    ("1/2", "\\frac{1}{2}"),
    ("0.5", "\\frac12"),
    ("\\dfrac{3}{4}", "0.75"),
    ("\\tfrac{3}{4}", "\\frac{3}{4}"),
    ("-\\frac{1}{3}", "-1/3"),
    ("0.3333333", "1/3"),
    ("2.50", "5/2"),
    ("$\\frac{1}{2}$", "0.5"),
    ("1e-7", "0.0000001"),
    # radicals and pi
    ("2\\sqrt{2}", "\\sqrt{8}"),
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}"),
    ("\\sqrt{12}", "2\\sqrt{3}"),
    ("2\\pi", "\\frac{4\\pi}{2}"),
    ("3.1415927", "\\pi"),
    ("\\frac{\\pi}{2}", "\\pi/2"),
    # intervals, sets, tuples
    ("[0,1)", "[0, 1)"),
    ("(-\\infty, 3)", "(-\\infty,3)"),
    ("\\left[2, 5\\right]", "[2,5]"),
    ("\\{1,2,3\\}", "\\{3,2,1\\}"),
    ("(1, 2)", "(1,2)"),
    ("\\left( 1, 2 \\right)", "(1,2)"),
    ("2, 3", "3, 2"),
    # equations
    ("x=3", "3"),
    ("3", "x = 3"),
    ("y = 2x + 1", "2x+1"),
    # percentages
    ("50\\%", "50"),
    ("50\\%", "0.5"),
    ("25%", "\\frac{1}{4}"),
    # units and degrees
    ("30^\\circ", "30"),
    ("30^{\\circ}", "30"),
    ("45°", "45"),
    ("10 \\text{ cm}", "10"),
    # LaTeX spacing and separators
    ("1\\,000", "1000"),
    ("1,000,000", "1000000"),
    ("\\!5", "5"),
    # symbolic
    ("x^2+2x+1", "(x+1)^2"),
    ("\\infty", "\\infty"),
    ("\\frac{x}{2}", "0.5x"),
]

NOT_EQUIVALENT = [
    ("3", "4"),
    ("1000001", "1000000"),
    ("0.3333", "1/3"),
    ("1e-7", "2e-7"),
    ("(0,1]", "[0,1)"),
    ("[0,1]", "[0,1)"),
    ("\\{1,2\\}", "\\{1,2,3\\}"),
    ("2\\sqrt{2}", "\\sqrt{2}"),
    ("\\pi", "3.14"),
    ("x=4", "3"),
    ("-5", "5"),
    ("51\\%", "0.5"),
    ("\\frac{1}{2}", "\\frac{1}{3}"),
    ("x^2+1", "(x+1)^2"),
    ("(1,2)", "(2,1)"),
    ("2\\pi", "\\pi"),
    ("31^\\circ", "30"),
    ("0", "1"),
    ("12", "21"),
    ("\\sqrt{3}", "3"),
]

NO_ANSWER = [(None, "5"), ("", "5"), ("   ", "5")]

# the reference is a plain number and the answer an expression equal to it: correct only when the user asks for
# symbolic equivalence (reward.domains.math.final_form=lenient); strict (the default) wants a number
LENIENT_ONLY = [
    ("\\frac{10}{4}", "\\frac{5}{2}"),
    ("\\sqrt{2}", "1.4142136"),
    ("\\sqrt{1225}", "35"),
    ("2^{10}", "1024"),
    ("3! + 1", "7"),
]

CASES = (
    [(p, g, "correct") for p, g in EQUIVALENT]
    + [(p, g, "incorrect") for p, g in NOT_EQUIVALENT]
    + [(p, g, "no_answer") for p, g in NO_ANSWER]
)


def check_status(case, final_form="strict"):
    """Run one case (module-level so process pools can pickle it)."""
    from metaagent.rewards.math import check_math

    pred, gold, _ = case
    return check_math(pred, gold, final_form=final_form).status
