"""Models shipped with the package: the example GPT the examples, the comparison
harness (``--preset``) and the tests share."""
