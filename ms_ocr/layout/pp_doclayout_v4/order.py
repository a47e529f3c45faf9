"""PP-DocLayoutV4's reading-order decoding over the kept boxes (transformers' PPDocLayoutV4ImageProcessor
_decode_reading_order, which follows PaddleX), in NumPy and plain Python:

1. successor edges i -> j where successor_logits[i, j] > 0, weighted by the logit;
2. cycles broken: while a depth-first search (nodes by index, edges in insertion order) finds a cycle, its weakest
   edge goes (ties: the first in the cycle's order);
3. the connected components of the undirected graph, each sorted topologically; among ready nodes the one with the
   highest sum of sigmoid(relative) against the other ready nodes goes first (ties: the smaller index);
4. components laid out by the mean over their nodes of the column sums of sigmoid(relative).

The arithmetic (float32 scores, Python sums) is the reference's, so equal logits give equal ranks."""

import numpy as np


def _first_cycle(count, edges):
    """The first cycle a depth-first search meets, as a node list, or None."""
    graph = [[] for _ in range(count)]
    for i, j in edges:
        graph[i].append(j)
    seen, on_path = [False] * count, [False] * count
    for root in range(count):
        if seen[root]:
            continue
        path, stack = [root], [iter(graph[root])]
        seen[root] = on_path[root] = True
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                on_path[path.pop()] = False
                stack.pop()
            elif on_path[nxt]:
                return path[path.index(nxt):]
            elif not seen[nxt]:
                seen[nxt] = on_path[nxt] = True
                path.append(nxt)
                stack.append(iter(graph[nxt]))
    return None


def _acyclic(count, edges):
    """edges {(i, j): weight}, insertion-ordered -> the edges left once every cycle lost its weakest edge."""
    edges = dict(edges)
    while True:
        cycle = _first_cycle(count, edges)
        if cycle is None:
            return list(edges)
        ring = list(zip(cycle, cycle[1:] + cycle[:1]))
        del edges[min(ring, key=edges.__getitem__)]


def _components(count, edges):
    """Connected components of the undirected graph, numbered by their smallest node, nodes ascending."""
    parent = list(range(count))

    def root(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for i, j in edges:
        a, b = root(i), root(j)
        if a != b:
            parent[max(a, b)] = min(a, b)
    groups = {}
    for n in range(count):
        groups.setdefault(root(n), []).append(n)
    return [groups[r] for r in sorted(groups)]


def _topological(count, edges, scores):
    """Kahn's order of a DAG; among ready nodes the best-scoring against the others (ties: smaller index)."""
    indegree = [0] * count
    graph = [[] for _ in range(count)]
    for i, j in edges:
        graph[i].append(j)
        indegree[j] += 1
    ready = [n for n in range(count) if indegree[n] == 0]
    order = []
    while ready:
        best = ready[0]
        if len(ready) > 1:
            best, best_score = None, -1.0
            for node in ready:
                score = sum(scores[node][other] for other in ready if other != node)
                if score > best_score or (score == best_score and (best is None or node < best)):
                    best, best_score = node, score
        ready.remove(best)
        order.append(best)
        for nxt in graph[best]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
    placed = set(order)  # a node stranded by a surviving cycle goes last
    return order + [n for n in range(count) if n not in placed]


def _sigmoid(x):
    e = np.exp(-np.abs(x))  # the stable form: the successor diagonal holds -1e4
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def decode_order(relative, successor):
    """relative, successor [N, N] float32 logits of the kept boxes -> ranks [N] (0 is read first)."""
    n = successor.shape[0]
    if n <= 1:
        return np.zeros(n, np.int64)
    edges = {(i, j): float(successor[i][j]) for i in range(n) for j in range(n) if i != j and successor[i][j] > 0}
    dag = _acyclic(n, edges)
    scores = _sigmoid(relative)
    np.fill_diagonal(scores, 0.0)
    votes = scores.sum(axis=0)
    laid = []
    for comp in _components(n, dag):
        if len(comp) == 1:
            laid.append(comp)
            continue
        local = {node: k for k, node in enumerate(comp)}
        sub = [(local[i], local[j]) for i, j in dag if i in local and j in local]
        laid.append([comp[k] for k in _topological(len(comp), sub, scores[np.ix_(comp, comp)])])
    laid.sort(key=lambda comp: float(np.mean(votes[comp])))
    ranks = np.zeros(n, np.int64)
    for rank, node in enumerate(node for comp in laid for node in comp):
        ranks[node] = rank
    return ranks
