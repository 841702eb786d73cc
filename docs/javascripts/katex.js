// Render the math that pymdownx.arithmatex (generic mode) leaves in <span|div class="arithmatex">: \( ... \)
// inline, \[ ... \] displayed. KaTeX and its auto-render extension are shipped with the site (assets/katex/).
function renderMath() {
  document.querySelectorAll(".arithmatex").forEach((el) => {
    renderMathInElement(el, {
      delimiters: [
        { left: "\\(", right: "\\)", display: false },
        { left: "\\[", right: "\\]", display: true },
      ],
      throwOnError: false,
    });
  });
}
if (typeof document$ !== "undefined") {
  document$.subscribe(renderMath); // Material's instant navigation re-renders each new page
} else {
  document.addEventListener("DOMContentLoaded", renderMath);
}
