"""What the faces share: the command line (`awaken_trio._cli`), the dashboard
(`awaken_trio._ui`) and the clients (`awaken_trio.client`).

- `shapes`: the JSON shapes of DESIGN §3.3 and the same values in words;
- `failures`: the exit codes, the refusals, `CommandFailed` and the error object;
- `words`: a refusal said in the words of the face a person uses;
- `input`: JSON arguments and whole numbers as a person types them;
- `controls`: the controls table, which runtime call each control makes and in which
  committed states it is offered.

Built on the public API alone (`awaken_trio`, `awaken_trio.store`). A face builds on this
package and never on another face (tests/test_layering.py checks it), so each face wraps a
runtime call once, here, and they cannot disagree.
"""
