"""The ground floor: the history contract and the shared errors. Imports
nothing else of the project; everything else may import it."""
