"""lmsci.laws"""
