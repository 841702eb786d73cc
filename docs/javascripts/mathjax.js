// MathJax configuration for pymdownx.arithmatex (generic mode): render \( ... \) and \[ ... \].
window.MathJax = {
  tex: { inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]], processEscapes: true, processEnvironments: true },
  options: { ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex" },
};
document$.subscribe(() => {
  if (window.MathJax && MathJax.typesetPromise) MathJax.typesetPromise();
});
