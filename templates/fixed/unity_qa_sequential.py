# name: unity_qa_sequential
# structure: reflection
# pattern: reflection
# domains: qa
# description: UnityMAS-O's iterative search loop (workflow C, reduced to two roles): a searcher writes the next query or <end>, the answerer updates the answer, up to 3 turns.
searcher = Agent("Searcher", "You write the next search query for the question, or <end> when the notes already answer it.", memory=False)
answerer = Agent("Answerer", "You answer the question from the notes with a short phrase inside <answer>...</answer>.", memory=False)
notes = ""
answer = answerer(f"Question: {task}\n\nNotes:\n(none)")
for t in range(3):
    query = searcher(f"Question: {task}\n\nNotes:\n{notes or '(none)'}\n\nCurrent answer: {answer}")
    if "<end>" in query:
        break
    notes += retrieve(query) + "\n"
    answer = answerer(f"Question: {task}\n\nNotes:\n{notes}")
submit(answer)
