"""Loop IR: statements and expressions after lowering, plus simplification."""
