"""lmsci.measure"""
