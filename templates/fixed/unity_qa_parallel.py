# name: unity_qa_parallel
# structure: other
# pattern: decompose
# domains: qa
# description: UnityMAS-O's parallel retrieval QA (workflow A): a decomposer writes search queries, the retriever runs them in parallel, an answerer answers from the passages.
decomposer = Agent("Decomposer", "You split a question into at most two short search queries, one per line.", memory=False)
answerer = Agent("Answerer", "You answer the question from the passages with a short phrase inside <answer>...</answer>.", memory=False)
queries = [q.strip() for q in decomposer(f"Question: {task}").split("\n") if q.strip()][:2] or [task]
passages = [retrieve(q) for q in queries]
context = "\n\n".join(passages)
submit(answerer(f"Question: {task}\n\nPassages:\n{context}"))
